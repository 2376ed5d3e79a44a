//! HTTPS on the REST and metrics ports (rustls with ring): a certificate chain and key read
//! from PEM files (`--tls-cert`, `--tls-key`; a cert-manager Secret's `tls.crt` and `tls.key`),
//! re-read when connections arrive (at most once a second) so a renewed certificate is used
//! without a restart. A client that
//! speaks plain HTTP to such a port is answered `400` saying to use `https://`, not left
//! waiting for a handshake.
//!
//! ```text
//!  TcpListener --accept--> first byte 0x16? --yes--> TLS handshake --> axum (TlsListener)
//!                                          --no---> "400: this port speaks HTTPS", close
//!  a connection, RELOAD_EVERY after the last look: re-read the files; a changed, valid pair
//!  replaces the one served (an invalid one is logged and the old pair kept)
//! ```

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often, at most, a new connection makes the certificate files be read again (the
/// kubelet updates a mounted Secret within about a minute of cert-manager renewing it).
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// How long a client may take to start and finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS record type of a handshake: the first byte a TLS client sends.
const TLS_HANDSHAKE: u8 = 0x16;

/// The flags that turn HTTPS on.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// Serve the REST API over HTTPS with this certificate (PEM, the server's first, then any
    /// intermediates), e.g. a cert-manager Secret's `tls.crt`. Re-read when it changes.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1), e.g. `tls.key`.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The certificate to serve, if both flags are given.
    pub fn load(&self) -> Result<Option<Arc<Tls>>, TlsError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Tls::load(cert, key).map(|t| Some(Arc::new(t))),
            (None, None) => Ok(None),
            _ => Err(TlsError::Half),
        }
    }
}

/// Why a certificate cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// One of `--tls-cert` and `--tls-key` without the other.
    #[error("--tls-cert and --tls-key go together")]
    Half,
    /// A file cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file holds no PEM block of the kind needed.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key is not one rustls signs with, or does not belong to the certificate.
    #[error("{cert} with {key}: {source}")]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why they do not make a pair.
        source: rustls::Error,
    },
}

/// The files a certificate comes from, and their contents when last loaded.
#[derive(Debug)]
struct Loaded {
    files: (Vec<u8>, Vec<u8>),
    key: Arc<CertifiedKey>,
}

/// A certificate and key served on every handshake, replaced when their files change.
#[derive(Debug)]
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Loaded>,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

impl Tls {
    /// Reads the pair; an error names the file and what is wrong.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let files = (read(cert)?, read(key)?);
        let certified = Self::parse(cert, key, &files)?;
        let current = RwLock::new(Loaded { files, key: certified });
        Ok(Tls { cert: cert.to_path_buf(), key: key.to_path_buf(), current })
    }

    fn parse(
        cert: &Path,
        key: &Path,
        (cert_pem, key_pem): &(Vec<u8>, Vec<u8>),
    ) -> Result<Arc<CertifiedKey>, TlsError> {
        let pem = |path: &Path, reason: String| TlsError::Pem { path: path.to_path_buf(), reason };
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem(cert, e.to_string()))?;
        if chain.is_empty() {
            return Err(pem(cert, "no PEM CERTIFICATE block in it".into()));
        }
        let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| pem(key, e.to_string()))?;
        let provider = rustls::crypto::ring::default_provider();
        let pair = |source| TlsError::Pair { cert: cert.to_path_buf(), key: key.to_path_buf(), source };
        CertifiedKey::from_der(chain, private, &provider).map(Arc::new).map_err(pair)
    }

    /// Re-reads the files: `Ok(true)` when they changed and the new pair is now served. A pair
    /// that does not load (half-written, mismatched mid-rotation) leaves the one in use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let files = (read(&self.cert)?, read(&self.key)?);
        if self.current.read().unwrap_or_else(|e| e.into_inner()).files == files {
            return Ok(false);
        }
        let key = Self::parse(&self.cert, &self.key, &files)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Loaded { files, key };
        Ok(true)
    }

    fn reload_logged(&self) {
        match self.reload() {
            Ok(true) => tracing::info!(cert = %self.cert.display(), "serving the renewed certificate"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the certificate files changed but do not load; serving the previous pair")
            }
        }
    }

    fn acceptor(self: &Arc<Self>) -> TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(Arc::clone(self))));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

#[derive(Debug)]
struct Resolver(Arc<Tls>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0.current.read().unwrap_or_else(|e| e.into_inner()).key))
    }
}

/// A listener whose connections are TLS streams, handshaken off the accept path so a slow
/// or silent client holds up no one else. Dropping it stops accepting.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS with `tls` on `listener`, re-reading the certificate files when a connection
    /// arrives `reload_every` or more after the last look.
    pub fn new(listener: TcpListener, tls: Arc<Tls>, reload_every: Duration) -> io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let accepting = tokio::spawn(accept_loop(listener, tls, reload_every, tx));
        Ok(TlsListener { ready, local, accepting })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Arc<Tls>,
    reload_every: Duration,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let acceptor = tls.acceptor();
    let mut checked = Instant::now();
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                // The files matter only when someone connects: look at them then, not on a timer.
                if checked.elapsed() >= reload_every {
                    // Reading the files is blocking I/O: on a blocking thread.
                    let t = tls.clone();
                    if let Err(e) = tokio::task::spawn_blocking(move || t.reload_logged()).await {
                        tracing::warn!(error = %e, "checking the certificate files failed; serving the previous pair");
                    }
                    checked = Instant::now();
                }
                tokio::spawn(handshake(acceptor.clone(), stream, peer, ready.clone()));
            }
            // Out of descriptors and the like: wait rather than spin.
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a plain-HTTP client reads from a TLS port.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 51\r\n\r\nthis port speaks HTTPS: use an https:// URL here.\r\n";

async fn handshake(
    acceptor: TlsAcceptor,
    mut stream: TcpStream,
    peer: SocketAddr,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
        Ok(Ok(1)) => {
            let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
            let _ = stream.shutdown().await;
            return;
        }
        _ => return,
    }
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let _ = ready.send((tls, peer)).await;
        }
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_http_answer_has_the_length_it_says() {
        let text = std::str::from_utf8(PLAIN_HTTP_ANSWER).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.ends_with(&format!("Content-Length: {}", body.len())));
    }

    #[test]
    fn files_that_are_not_a_pair_are_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("tideway-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, "not PEM").unwrap();
        std::fs::write(&key, "not PEM").unwrap();
        let e = Tls::load(&cert, &key).unwrap_err().to_string();
        assert!(e.contains("tls.crt") && e.contains("no PEM CERTIFICATE"), "{e}");
        let e = Tls::load(&dir.join("missing.crt"), &key).unwrap_err().to_string();
        assert!(e.starts_with("reading ") && e.contains("missing.crt"), "{e}");
        let half = TlsArgs { tls_cert: Some(cert), tls_key: None };
        assert!(matches!(half.load(), Err(TlsError::Half)));
        assert!(TlsArgs::default().load().unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
