//! A test PKI made at test time (rcgen): a CA, a server certificate for
//! 127.0.0.1 and localhost, and a client certificate.

/// PEM files of a test CA, a server certificate for 127.0.0.1/localhost and
/// a client certificate, all made here.
#[derive(Debug)]
pub struct Pki {
    /// The CA's certificate.
    pub ca: std::path::PathBuf,
    /// The server's certificate, signed by the CA.
    pub server_cert: std::path::PathBuf,
    /// The server's private key.
    pub server_key: std::path::PathBuf,
    /// The client's certificate, signed by the CA.
    pub client_cert: std::path::PathBuf,
    /// The client's private key.
    pub client_key: std::path::PathBuf,
}

/// A fresh [`Pki`] in a temporary directory.
pub fn make_pki() -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let dir = super::paths::tempdir("pki");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "vllm-otel-metrics test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, tag: &str| {
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, tag);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let (cert_path, key_path) = (
            dir.join(format!("{tag}.crt")),
            dir.join(format!("{tag}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    };
    let (server_cert, server_key) = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
        "server",
    );
    let (client_cert, client_key) = leaf(
        vec!["client".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        "client",
    );
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    Pki {
        ca: ca_path,
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}
