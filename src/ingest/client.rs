//! Streams records to a remote `serve` (the `--target` of `replay` and
//! `simulate`): a bounded channel feeds one client-streaming call, so a
//! slow server slows the producer down instead of filling memory.

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use super::proto::{pb, record_to_proto};
use crate::protocol::Record;

/// Messages buffered between the producer and the network.
const BUFFERED: usize = 64;

/// A client-streaming call in progress.
#[derive(Debug)]
pub struct RemoteSink {
    target: String,
    sender: Option<mpsc::Sender<pb::Record>>,
    call: JoinHandle<Result<pb::IngestSummary, tonic::Status>>,
    runtime: Handle,
}

impl RemoteSink {
    /// Connects to `target` (e.g. `http://127.0.0.1:50051`) and opens the stream.
    /// Call from outside the runtime: it blocks on the connection.
    pub fn connect(target: &str, runtime: &Handle) -> Result<RemoteSink, String> {
        let mut client = runtime
            .block_on(pb::ingest_client::IngestClient::connect(target.to_owned()))
            .map_err(|e| format!("cannot connect to {target}: {e}"))?
            .max_encoding_message_size(64 << 20);
        let (sender, receiver) = mpsc::channel(BUFFERED);
        let call = runtime.spawn(async move {
            client
                .stream(ReceiverStream::new(receiver))
                .await
                .map(tonic::Response::into_inner)
        });
        Ok(RemoteSink {
            target: target.to_owned(),
            sender: Some(sender),
            call,
            runtime: runtime.clone(),
        })
    }

    /// Sends one record, waiting while the buffer is full. Returns false once
    /// the call has ended (the record is not sent); [`RemoteSink::finish`] then says why.
    pub fn send(&mut self, record: &Record) -> bool {
        let Some(sender) = &self.sender else {
            return false;
        };
        if sender.blocking_send(record_to_proto(record)).is_err() {
            self.sender = None;
            return false;
        }
        true
    }

    /// Closes the stream and waits for the server's summary.
    pub fn finish(mut self) -> Result<pb::IngestSummary, String> {
        self.sender = None;
        let target = self.target;
        match self.runtime.block_on(self.call) {
            Ok(Ok(summary)) => Ok(summary),
            Ok(Err(status)) => Err(format!(
                "{target} ended the stream: {}: {}",
                status.code(),
                status.message()
            )),
            Err(e) => Err(format!("the stream to {target} failed: {e}")),
        }
    }
}
