//! Probes, as kubelet runs them from the node: `httpGet` (a status from 200 to 399 passes;
//! HTTPS is not verified, as kubelet does not), `tcpSocket` (a connection passes) and `exec`
//! (the command in the container's namespaces through `nsenter`; exit 0 passes), against the
//! pod's address (the node's for a host-network pod), every `periodSeconds`, with the
//! thresholds counted as kubelet counts them. A readiness probe also fails while the pod's
//! `unready` flag file exists (`tideway lab pod NS/POD unready`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `startupProbe`.
    Startup,
    /// `readinessProbe`.
    Readiness,
    /// `livenessProbe`.
    Liveness,
}

/// What a probe checks, resolved against the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// An HTTP GET.
    Http {
        /// `https`.
        tls: bool,
        /// Address and port.
        addr: SocketAddr,
        /// The path (and query).
        path: String,
        /// The Host header.
        host: String,
    },
    /// A TCP connection.
    Tcp(SocketAddr),
    /// A command in the container (argv after `nsenter`'s options).
    Exec(Vec<String>),
}

/// A probe's rhythm and thresholds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// `initialDelaySeconds`.
    pub initial_delay: Duration,
    /// `periodSeconds`.
    pub period: Duration,
    /// `timeoutSeconds`.
    pub timeout: Duration,
    /// `successThreshold`.
    pub success_threshold: u32,
    /// `failureThreshold`.
    pub failure_threshold: u32,
}

/// The schedule of `p` with kubelet's defaults (10 s period, 1 s timeout, thresholds 1 and 3).
pub fn schedule(p: &Probe) -> Schedule {
    let secs = |v: Option<i32>, d: i32| Duration::from_secs(v.unwrap_or(d).max(0) as u64);
    Schedule {
        initial_delay: secs(p.initial_delay_seconds, 0),
        period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
        timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
        success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
        failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
    }
}

/// A named or numbered port of `container`.
fn port(container: &Container, p: &IntOrString) -> Option<u16> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => container
            .ports
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|cp| cp.name.as_deref() == Some(name))
            .and_then(|cp| u16::try_from(cp.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}

/// What probe `p` of `container` checks at `ip`; `exec` maps `tideway` to `tideway_bin`.
pub fn check(p: &Probe, container: &Container, ip: IpAddr, tideway_bin: &str) -> Option<Check> {
    if let Some(h) = &p.http_get {
        let host = h.host.as_deref().and_then(|h| h.parse().ok()).unwrap_or(ip);
        let addr = SocketAddr::new(host, port(container, &h.port)?);
        let path = h.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into());
        let tls = h.scheme.as_deref() == Some("HTTPS");
        let header = h
            .http_headers
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|x| x.name.eq_ignore_ascii_case("host"));
        let host = header.map_or_else(|| addr.to_string(), |x| x.value.clone());
        let path = if path.starts_with('/') { path } else { format!("/{path}") };
        return Some(Check::Http { tls, addr, path, host });
    }
    if let Some(t) = &p.tcp_socket {
        let host = t.host.as_deref().and_then(|h| h.parse().ok()).unwrap_or(ip);
        return Some(Check::Tcp(SocketAddr::new(host, port(container, &t.port)?)));
    }
    let argv = p.exec.as_ref()?.command.clone()?;
    let mut argv = argv;
    if argv.first().is_some_and(|a| std::path::Path::new(a).file_name().is_some_and(|n| n == "tideway")) {
        argv[0] = tideway_bin.to_string();
    }
    Some(Check::Exec(argv))
}

/// Whether an HTTP status line passes (200 to 399).
pub fn status_passes(status_line: &str) -> bool {
    let code: u16 = status_line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (200..400).contains(&code)
}

/// Counts results into a state as kubelet's prober worker does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    successes: u32,
    failures: u32,
    /// The current verdict (`None` until the thresholds first decide).
    pub state: Option<bool>,
}

impl Counter {
    /// A counter starting undecided (readiness and startup start failing; liveness passing).
    pub fn new(initial: Option<bool>) -> Counter {
        Counter { successes: 0, failures: 0, state: initial }
    }

    /// Adds a result; the new verdict if it changed.
    pub fn add(&mut self, ok: bool, s: &Schedule) -> Option<bool> {
        if ok {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let verdict = if ok && self.successes >= s.success_threshold {
            Some(true)
        } else if !ok && self.failures >= s.failure_threshold {
            Some(false)
        } else {
            None
        };
        match verdict {
            Some(v) if self.state != Some(v) => {
                self.state = Some(v);
                Some(v)
            }
            _ => None,
        }
    }
}

/// The process whose namespaces an exec probe enters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// This one.
    Pid(i32),
    /// The one whose pid a runtime wrote here (a runc container's first process).
    PidFile(PathBuf),
}

impl Target {
    fn pid(&self) -> Result<i32, String> {
        match self {
            Target::Pid(p) => Ok(*p),
            Target::PidFile(f) => std::fs::read_to_string(f)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .ok_or_else(|| format!("the container has not started yet ({} is not written)", f.display())),
        }
    }
}

/// Runs `check` once within `timeout`; whether it passed (and why not).
pub async fn run(check: &Check, timeout: Duration, target: &Target) -> Result<(), String> {
    match tokio::time::timeout(timeout, run_inner(check, target)).await {
        Ok(r) => r,
        Err(_) => Err(format!("timed out after {timeout:?}")),
    }
}

async fn run_inner(check: &Check, target: &Target) -> Result<(), String> {
    match check {
        Check::Tcp(addr) => TcpStream::connect(addr).await.map(drop).map_err(|e| e.to_string()),
        Check::Http { tls, addr, path, host } => {
            let request = format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\nConnection: close\r\n\r\n"
            );
            let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let line = if *tls {
                let connector = tokio_rustls::TlsConnector::from(Arc::new(no_verify_config()));
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                let mut s = connector.connect(name, tcp).await.map_err(|e| e.to_string())?;
                exchange(&mut s, &request).await?
            } else {
                let mut s = tcp;
                exchange(&mut s, &request).await?
            };
            if status_passes(&line) { Ok(()) } else { Err(format!("HTTP probe failed: {line}")) }
        }
        Check::Exec(argv) => {
            let pid = target.pid()?;
            let out = tokio::process::Command::new("nsenter")
                .args(["--target", &pid.to_string(), "--mount", "--net", "--uts", "--"])
                .args(argv)
                .output()
                .await
                .map_err(|e| e.to_string())?;
            if out.status.success() { Ok(()) } else { Err(format!("exec probe: {}", out.status)) }
        }
    }
}

async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    request: &str,
) -> Result<String, String> {
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 256];
    let mut got = 0;
    while got < buf.len() {
        let n = s.read(&mut buf[got..]).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        got += n;
        if buf[..got].contains(&b'\n') {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf[..got]).into_owned();
    Ok(text.lines().next().unwrap_or_default().to_string())
}

/// TLS that accepts any certificate: kubelet does not verify probe targets.
fn no_verify_config() -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth()
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A probe's loop: hands each verdict change to `out` until it returns false. A readiness
/// probe fails while `unready_flag` exists. A startup probe ends once it passes.
pub async fn worker(
    kind: Kind,
    check: Check,
    schedule: Schedule,
    target: Target,
    unready_flag: PathBuf,
    out: impl Fn(bool) -> bool + Send + 'static,
) {
    let mut counter = Counter::new(match kind {
        Kind::Liveness => Some(true),
        _ => None,
    });
    tokio::time::sleep(schedule.initial_delay).await;
    let mut tick = tokio::time::interval(schedule.period);
    loop {
        tick.tick().await;
        let result = if kind == Kind::Readiness && unready_flag.exists() {
            Err("the pod is flagged unready".to_string())
        } else {
            run(&check, schedule.timeout, &target).await
        };
        if let Err(why) = &result {
            tracing::debug!(?kind, %why, "probe failed");
        }
        if let Some(v) = counter.add(result.is_ok(), &schedule)
            && !out(v)
        {
            return;
        }
        if kind == Kind::Startup && counter.state == Some(true) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn container() -> Container {
        serde_json::from_value(
            json!({"name": "agent", "ports": [{"name": "healthz", "containerPort": 10256}]}),
        )
        .unwrap()
    }

    #[test]
    fn probes_resolve_named_ports_and_default_to_the_pods_address() {
        let ip: IpAddr = "10.10.1.2".parse().unwrap();
        let p: Probe =
            serde_json::from_value(json!({"httpGet": {"path": "/healthz", "port": "healthz"}})).unwrap();
        assert_eq!(
            check(&p, &container(), ip, "/b/tideway"),
            Some(Check::Http {
                tls: false,
                addr: "10.10.1.2:10256".parse().unwrap(),
                path: "/healthz".into(),
                host: "10.10.1.2:10256".into()
            })
        );
        let p: Probe = serde_json::from_value(json!({"httpGet": {"port": 8443, "scheme": "HTTPS"}})).unwrap();
        assert!(
            matches!(check(&p, &container(), ip, "/b"), Some(Check::Http { tls: true, path, .. }) if path == "/")
        );
        let p: Probe = serde_json::from_value(json!({"tcpSocket": {"port": 53}})).unwrap();
        assert_eq!(check(&p, &container(), ip, "/b"), Some(Check::Tcp("10.10.1.2:53".parse().unwrap())));
        let p: Probe = serde_json::from_value(json!({"exec": {"command": ["tideway", "version"]}})).unwrap();
        assert_eq!(
            check(&p, &container(), ip, "/b/tideway"),
            Some(Check::Exec(vec!["/b/tideway".into(), "version".into()]))
        );
        let p: Probe = serde_json::from_value(json!({"httpGet": {"port": "nope"}})).unwrap();
        assert_eq!(check(&p, &container(), ip, "/b"), None, "an unknown port name");
        let s =
            schedule(&serde_json::from_value(json!({"periodSeconds": 2, "failureThreshold": 6})).unwrap());
        assert_eq!(
            (s.period, s.timeout, s.success_threshold, s.failure_threshold),
            (Duration::from_secs(2), Duration::from_secs(1), 1, 6)
        );
        assert!(status_passes("HTTP/1.1 200 OK") && status_passes("HTTP/1.0 302 Found"));
        assert!(!status_passes("HTTP/1.1 503 Service Unavailable") && !status_passes("garbage"));
    }

    #[test]
    fn verdicts_change_only_when_a_threshold_is_reached() {
        let s = Schedule {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
        };
        let mut c = Counter::new(None);
        assert_eq!(c.add(true, &s), None);
        assert_eq!(c.add(true, &s), Some(true));
        assert_eq!(c.add(true, &s), None);
        assert_eq!(c.add(false, &s), None);
        assert_eq!(c.add(false, &s), None);
        assert_eq!(c.add(true, &s), None, "a success resets the failures");
        assert_eq!(c.add(false, &s), None);
        assert_eq!(c.add(false, &s), None);
        assert_eq!(c.add(false, &s), Some(false));
    }
}
