//! HTTPS on the REST and metrics ports (rustls with ring): a certificate chain and key read
//! from PEM files (`--tls-cert`, `--tls-key`; a cert-manager Secret's `tls.crt` and `tls.key`),
//! re-read when connections arrive (at most once a second) so a renewed certificate is used
//! without a restart. A client that
//! speaks plain HTTP to such a port is answered `400` saying to use `https://`, not left
//! waiting for a handshake.
//!
//! ```text
//!  accepted (crate::listen) --> first byte 0x16? --yes--> TLS handshake --> HTTP/1.1
//!                                                --no---> "400: this port speaks HTTPS", close
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
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often, at most, a new connection makes the certificate files be read again (the
/// kubelet updates a mounted Secret within about a minute of cert-manager renewing it).
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

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

/// The TLS half of [`crate::listen::serve`]: the acceptor, and when the files were last read.
#[derive(Debug)]
pub(crate) struct TlsAccept {
    tls: Arc<Tls>,
    acceptor: Handshaker,
    checked: Instant,
}

impl TlsAccept {
    pub(crate) fn new(tls: Arc<Tls>) -> Self {
        let acceptor = Handshaker(tls.acceptor());
        TlsAccept { tls, acceptor, checked: Instant::now() }
    }

    /// The files matter only when someone connects: a connection arriving [`RELOAD_EVERY`]
    /// or more after the last look makes them be read again (on a blocking thread).
    pub(crate) async fn reload_if_due(&mut self) {
        if self.checked.elapsed() < RELOAD_EVERY {
            return;
        }
        let t = Arc::clone(&self.tls);
        if let Err(e) = tokio::task::spawn_blocking(move || t.reload_logged()).await {
            tracing::warn!(error = %e, "checking the certificate files failed; serving the previous pair");
        }
        self.checked = Instant::now();
    }

    pub(crate) fn acceptor(&self) -> Handshaker {
        self.acceptor.clone()
    }
}

/// Makes a TLS stream of a TCP connection.
#[derive(Clone)]
pub(crate) struct Handshaker(TlsAcceptor);

impl std::fmt::Debug for Handshaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handshaker")
    }
}

/// What a plain-HTTP client reads from a TLS port.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 51\r\n\r\nthis port speaks HTTPS: use an https:// URL here.\r\n";

impl Handshaker {
    /// The TLS stream, if the client starts and finishes a handshake within `timeout`; a
    /// client speaking plain HTTP is answered [`PLAIN_HTTP_ANSWER`].
    pub(crate) async fn handshake(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
        timeout: Duration,
    ) -> Option<TlsStream<TcpStream>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
            Ok(Ok(1)) => {
                let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
                let _ = stream.shutdown().await;
                return None;
            }
            _ => return None,
        }
        match tokio::time::timeout_at(deadline, self.0.accept(stream)).await {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                None
            }
        }
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
