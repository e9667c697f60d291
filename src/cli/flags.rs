//! The command line's names for the library's settings. The library's
//! errors name a setting by its field (`kv_blocks`, `ServerTlsFiles::cert`);
//! before the command line shows one, each setting is renamed to the flag
//! the command line fills it from (`--kv-blocks`, `--tls-cert`). The flag
//! comes from clap's own definition of that argument, so a renamed flag
//! cannot leave a stale name in a message.

use clap::CommandFactory;

use super::command::Cli;
use vllm_otel_metrics::error::{Setting, SettingKey, Settings};

/// The command line's argument (its clap id: the args struct's field) that
/// fills each library setting outside [`SimConfig`](vllm_otel_metrics::sources::sim::SimConfig),
/// whose fields the simulator's arguments (sim_args.rs) are named after.
const ARGUMENTS: &[((&str, &str), &str)] = &[
    (("ServerTlsFiles", "cert"), "tls_cert"),
    (("ServerTlsFiles", "key"), "tls_key"),
    (("ServerTlsFiles", "client_ca"), "tls_client_ca"),
    (("BearerToken::from_file", "token_file"), "auth_token_file"),
    (("RemoteSink::connect", "target"), "target"),
    (("TargetSecurity", "ca"), "target_ca"),
    (("TargetSecurity", "token_file"), "target_token_file"),
    (("OtlpOptions", "endpoint"), "otlp_endpoint"),
    (("OtlpOptions", "traces_endpoint"), "otlp_traces_endpoint"),
    (("OtlpOptions", "headers"), "otlp_header"),
    (("TlsFiles", "certificate"), "otlp_certificate"),
    (
        ("TlsFiles", "client_certificate"),
        "otlp_client_certificate",
    ),
    (("TlsFiles", "client_key"), "otlp_client_key"),
];

/// The flag of `command` that fills `key` (`--kv-blocks`); `None` for a
/// variable, which keeps its own name.
fn flag(command: &clap::Command, key: SettingKey) -> Option<String> {
    let SettingKey::Field { scope, name } = key else {
        return None;
    };
    let id = match scope {
        "SimConfig" => name,
        _ => ARGUMENTS
            .iter()
            .find(|(setting, _)| *setting == (scope, name))
            .map(|(_, id)| *id)?,
    };
    long_of(command, id).map(|long| format!("--{long}"))
}

/// The long name of the argument `id` in `command` or its subcommands.
fn long_of(command: &clap::Command, id: &str) -> Option<String> {
    command
        .get_arguments()
        .find(|argument| argument.get_id() == id)
        .and_then(|argument| argument.get_long().map(str::to_owned))
        .or_else(|| {
            command
                .get_subcommands()
                .find_map(|subcommand| long_of(subcommand, id))
        })
}

/// `error` with its settings shown as flags.
pub(super) fn with_flags<E: Settings>(error: E) -> E {
    let command = Cli::command();
    error.rename(&|key| flag(&command, key))
}

/// Where a setting came from, for a start-up line: its flag or variable, or
/// `default`.
pub(super) fn source(setting: Option<&Setting>) -> String {
    match setting {
        Some(setting) => {
            let command = Cli::command();
            let mut setting = setting.clone();
            setting.show_as(&|key| flag(&command, key));
            setting.to_string()
        }
        None => "default".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::sim_args::SimArgs;
    use clap::Args;
    use vllm_otel_metrics::listen::BearerToken;
    use vllm_otel_metrics::sources::ingest::client::RemoteSink;

    #[test]
    fn every_setting_the_table_names_has_a_flag() {
        let command = Cli::command();
        for ((scope, name), id) in ARGUMENTS {
            let shown = flag(&command, SettingKey::Field { scope, name });
            assert!(
                shown.as_deref().is_some_and(|f| f.starts_with("--")),
                "{scope}::{name} (argument {id}) has no flag"
            );
        }
        for setting in [BearerToken::TOKEN_FILE, RemoteSink::TARGET] {
            assert!(
                flag(&command, setting.key()).is_some(),
                "{setting:?} has no flag"
            );
        }
    }

    #[test]
    fn every_simulator_setting_is_its_own_flag() {
        let command = Cli::command();
        let simulator = SimArgs::augment_args(clap::Command::new("simulate"));
        for argument in simulator.get_arguments() {
            let name = argument.get_id().as_str().to_owned().leak();
            let shown = flag(
                &command,
                SettingKey::Field {
                    scope: "SimConfig",
                    name,
                },
            );
            assert_eq!(
                shown.as_deref(),
                Some(format!("--{}", name.replace('_', "-")).as_str())
            );
        }
        // The one SimConfig field the simulator does not take as its own
        // argument is the common --max-model-len.
        let shown = flag(
            &command,
            SettingKey::Field {
                scope: "SimConfig",
                name: "max_model_len",
            },
        );
        assert_eq!(shown.as_deref(), Some("--max-model-len"));
    }

    #[test]
    fn variables_keep_their_names_and_defaults_say_so() {
        let variable = Setting::variable("OTEL_EXPORTER_OTLP_ENDPOINT");
        assert_eq!(source(Some(&variable)), "OTEL_EXPORTER_OTLP_ENDPOINT");
        assert_eq!(source(None), "default");
        let endpoint = Setting::field("OtlpOptions::endpoint");
        assert_eq!(source(Some(&endpoint)), "--otlp-endpoint");
    }
}
