//! The running lab's control socket (`<dir>/control.sock`): one JSON request per connection,
//! one JSON answer. `lab apply`, `lab status`, `lab down` and the fault commands (`lab kill`,
//! `start`, `node`, `partition`, `heal`, `api`) use it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::runner::LabError;

/// A request to the running lab.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    /// Make the lab match this lab file.
    Apply {
        /// The file's name (for messages).
        file: String,
        /// Its text.
        text: String,
        /// Whether the lab becomes the file, takes its objects in, or loses them.
        #[serde(default)]
        how: crate::spec::Change,
    },
    /// Report nodes, Services, pods, hosts and APIs.
    Status,
    /// Make or undo a fault.
    Fault {
        /// Which.
        fault: crate::faults::Fault,
    },
    /// Tear the lab down and exit.
    Down,
}

/// A request and where its answer goes.
pub type Incoming = (Request, oneshot::Sender<Result<Value, LabError>>);

/// Why a request got no result.
#[derive(Debug, thiserror::Error)]
enum Unanswered {
    /// Not a request.
    #[error("bad request: {0}")]
    BadRequest(#[from] serde_json::Error),
    /// The lab is going away.
    #[error("the lab is stopping")]
    Stopping,
    /// The lab refused it.
    #[error(transparent)]
    Lab(#[from] LabError),
}

/// The socket's path in the lab directory.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// Accepts requests on `path` and hands them to the lab's loop.
pub async fn serve(path: PathBuf, to_lab: mpsc::Sender<Incoming>) -> std::io::Result<()> {
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    loop {
        let (stream, _) = listener.accept().await?;
        let to_lab = to_lab.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            if tokio::io::BufReader::new(read).read_line(&mut line).await.is_err() {
                return;
            }
            let answer: Result<Value, Unanswered> = match serde_json::from_str::<Request>(&line) {
                Err(e) => Err(e.into()),
                Ok(req) => {
                    let (tx, rx) = oneshot::channel();
                    if to_lab.send((req, tx)).await.is_err() {
                        Err(Unanswered::Stopping)
                    } else {
                        rx.await.map_err(|_| Unanswered::Stopping).and_then(|r| r.map_err(Unanswered::from))
                    }
                }
            };
            let body = match answer {
                Ok(v) => serde_json::json!({"ok": true, "result": v}),
                Err(e) => serde_json::json!({"ok": false, "error": e.to_string()}),
            };
            let _ = write.write_all(format!("{body}\n").as_bytes()).await;
        });
    }
}

/// Why a request to a running lab failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No lab answers there.
    #[error("no running lab at {0} ({1})")]
    NotRunning(String, std::io::Error),
    /// The lab refused the request.
    #[error("{0}")]
    Refused(String),
    /// The answer was not readable.
    #[error("unreadable answer from the lab: {0}")]
    Garbled(String),
}

/// Sends `req` to the lab in `dir` and waits for its answer.
pub fn request(dir: &Path, req: &Request) -> Result<Value, ClientError> {
    let path = socket_path(dir);
    let mut s =
        UnixStream::connect(&path).map_err(|e| ClientError::NotRunning(path.display().to_string(), e))?;
    let line = serde_json::to_string(req).map_err(|e| ClientError::Garbled(e.to_string()))?;
    writeln!(s, "{line}").map_err(|e| ClientError::NotRunning(path.display().to_string(), e))?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).map_err(|e| ClientError::Garbled(e.to_string()))?;
    let v: Value =
        serde_json::from_str(&answer).map_err(|e| ClientError::Garbled(format!("{e}: {answer:?}")))?;
    if v["ok"] == true {
        Ok(v["result"].clone())
    } else {
        Err(ClientError::Refused(v["error"].as_str().unwrap_or("refused").to_string()))
    }
}
