//! HTTPS on the REST ports, as curl sees it: the real operator and DNS binaries serving with a
//! certificate from a throwaway CA (the lab's), a client without the CA refused, a plain-HTTP
//! client told to use https:// at once, and a renewed certificate served without a restart.
//! And the other direction: the operator's traces reaching an OTLP/HTTP collector over HTTPS.
//! Needs `openssl` and `curl`; no root.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use support::{free_port, patience};
use tideway_lab::certs;
use tideway_tests::netns::eventually;

/// A component process, killed when dropped.
struct Component(Child);

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path, log: &str, args: &[&str]) -> Component {
    let log = std::fs::File::create(dir.join(log)).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tideway"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("tideway");
    Component(child)
}

/// `curl URL` with `extra` flags: the exit code and what it printed (status code last).
fn curl(extra: &[&str], url: &str) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-w", " %{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl (the HTTPS tests need it)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tideway-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cluster.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n")
        .unwrap();
    dir
}

#[test]
fn the_operator_serves_https_that_curl_verifies_with_the_ca_only() {
    let dir = test_dir("operator");
    let ca = certs::make_ca(&dir).unwrap();
    // Names only, no address: a client at 127.0.0.1 must name the server it expects.
    let cert = certs::issue(&dir, "operator", &["localhost", "tideway-operator"], &[]).unwrap();
    let port = free_port();
    let source = format!("file:{}", path(&dir.join("cluster.yaml")));
    let bind = format!("127.0.0.1:{port}");
    let (c, k) = (path(&cert.cert), path(&cert.key));
    let args =
        ["operator", "--source", &source, "--http-bind-address", &bind, "--tls-cert", &c, "--tls-key", &k];
    let _operator = start(&dir, "operator.log", &args);
    let log = || std::fs::read_to_string(dir.join("operator.log")).unwrap_or_default();
    let url = format!("https://localhost:{port}/healthz");

    let with_ca = |ca: &Path| {
        let (code, out) = curl(&["--cacert", &path(ca)], &url);
        if code == 0 && out == "ok 200" { Ok(()) } else { Err(format!("curl exit {code}: {out}")) }
    };
    eventually(patience(20.0), || with_ca(&ca)).unwrap_or_else(|e| panic!("{e}\n{}", log()));

    // Without the CA, curl cannot verify the server (exit 60).
    let (code, out) = curl(&[], &url);
    assert_eq!(code, 60, "{out}");

    // Plain HTTP to the HTTPS port: an answer saying so, not a hang.
    let (code, out) = curl(&[], &format!("http://localhost:{port}/healthz"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("this port speaks HTTPS: use an https:// URL") && out.ends_with(" 400"), "{out}");

    // The CLI: verified with --ca-file; without it the certificate is refused; told to use
    // https:// when it speaks plain HTTP.
    let tideway = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tideway")).args(args).output().unwrap();
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let https = format!("https://localhost:{port}");
    let (ok, out) = tideway(&["status", "--operator", &https, "--ca-file", &path(&ca), "--json"]);
    assert!(ok && out.contains("\"proxyConfigs\""), "{out}");
    let (ok, out) = tideway(&["status", "--operator", &https, "--json"]);
    assert!(!ok && out.contains("invalid peer certificate"), "{out}");
    let (ok, out) = tideway(&["status", "--operator", &format!("http://localhost:{port}"), "--json"]);
    assert!(!ok && out.contains("use an https:// URL"), "{out}");
    // At an address the certificate does not carry: refused, unless told the name to expect.
    let by_address = format!("https://127.0.0.1:{port}");
    let (ok, out) = tideway(&["status", "--operator", &by_address, "--ca-file", &path(&ca), "--json"]);
    assert!(!ok && out.contains("certificate not valid for name \"127.0.0.1\""), "{out}");
    let name = ["--tls-server-name", "tideway-operator"];
    let (ok, out) = tideway(
        &[&["status", "--operator", &by_address, "--ca-file", &path(&ca), "--json"][..], &name].concat(),
    );
    assert!(ok && out.contains("\"proxyConfigs\""), "{out}");

    // Renewal: a new CA and certificate written over the files are served without a restart,
    // and the old CA no longer verifies the server.
    let old_ca = dir.join("old-ca.crt");
    std::fs::copy(&ca, &old_ca).unwrap();
    certs::make_ca(&dir).unwrap();
    certs::issue(&dir, "operator", &["localhost", "tideway-operator"], &[]).unwrap();
    eventually(patience(20.0), || with_ca(&ca)).unwrap_or_else(|e| panic!("renewed: {e}\n{}", log()));
    assert!(with_ca(&old_ca).is_err());
    assert!(log().contains("serving the renewed certificate"), "{}", log());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_dns_rest_api_serves_https_and_its_probes_stay_plain() {
    let dir = test_dir("dns");
    let ca = certs::make_ca(&dir).unwrap();
    let cert = certs::issue(&dir, "dns", &["localhost"], &[]).unwrap();
    let source = format!("file:{}", path(&dir.join("cluster.yaml")));
    let (listen, api, ready) = (free_port(), free_port(), free_port());
    let listen = format!("127.0.0.1:{listen}");
    let (api, ready) = (format!("127.0.0.1:{api}"), format!("127.0.0.1:{ready}"));
    let (c, k) = (path(&cert.cert), path(&cert.key));
    let args = [
        "dns",
        "--source",
        &source,
        "--listen",
        &listen,
        "--upstream",
        "127.0.0.1:9",
        "--no-loop-probe",
        "--workers",
        "1",
        "--lameduck",
        "0s",
        "--health-listen",
        "none",
        "--metrics-listen",
        "none",
        "--ready-listen",
        &ready,
        "--api-listen",
        &api,
        "--tls-cert",
        &c,
        "--tls-key",
        &k,
    ];
    let _dns = start(&dir, "dns.log", &args);
    let log = || std::fs::read_to_string(dir.join("dns.log")).unwrap_or_default();
    let stats = format!("https://{}/api/v1/stats", api.replace("127.0.0.1", "localhost"));
    let answered = eventually(patience(20.0), || {
        let (code, out) = curl(&["--cacert", &path(&ca)], &stats);
        if code == 0 && out.ends_with(" 200") { Ok(out) } else { Err(format!("curl exit {code}: {out}")) }
    });
    answered.unwrap_or_else(|e| panic!("{e}\n{}", log()));
    let (code, out) = curl(&[], &format!("http://{ready}/ready"));
    assert_eq!(code, 0, "the readiness probe stays plain HTTP: {out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The receiving end of OTLP/HTTP over HTTPS: span names from the protobuf bodies posted to
/// `/v1/traces`, decoded with the OpenTelemetry protocol's own types.
async fn otlp_receiver(
    listener: tokio::net::TcpListener,
    tls: std::sync::Arc<tideway_serve::tls::Tls>,
    spans: std::sync::mpsc::Sender<String>,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message as _;
    let receive = move |body: axum::body::Bytes| {
        let spans = spans.clone();
        async move {
            let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                return axum::http::StatusCode::BAD_REQUEST;
            };
            let scopes = request.resource_spans.into_iter().flat_map(|r| r.scope_spans);
            for span in scopes.flat_map(|s| s.spans) {
                let _ = spans.send(span.name);
            }
            axum::http::StatusCode::OK
        }
    };
    let router = axum::Router::new().route("/v1/traces", axum::routing::post(receive));
    let _ = tideway_serve::http::serve(listener, Some(tls), router, std::future::pending()).await;
}

#[test]
fn traces_reach_an_https_collector_verified_with_its_ca() {
    let dir = test_dir("otlp");
    let ca = certs::make_ca(&dir).unwrap();
    let cert = certs::issue(&dir, "collector", &["localhost"], &[]).unwrap();
    let tls = std::sync::Arc::new(tideway_serve::tls::Tls::load(&cert.cert, &cert.key).unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, spans) = std::sync::mpsc::channel();
    runtime.spawn(otlp_receiver(listener, tls, tx));

    let source = format!("file:{}", path(&dir.join("cluster.yaml")));
    let bind = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("operator.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tideway"))
        .args(["operator", "--source", &source, "--http-bind-address", &bind])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("https://localhost:{port}"))
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let _operator = Component(child);
    let reconcile = eventually(patience(30.0), || match spans.try_recv() {
        Ok(name) if name == "reconcile" => Ok(()),
        Ok(name) => Err(format!("only {name}")),
        Err(e) => Err(e.to_string()),
    });
    let log = std::fs::read_to_string(dir.join("operator.log")).unwrap_or_default();
    reconcile.unwrap_or_else(|e| panic!("no reconcile span at the collector: {e}\n{log}"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An HTTPS listener against clients that never finish: one that connects and sends nothing,
/// one that starts a handshake (the first byte of a ClientHello) and stops, and one that
/// finishes the handshake but sends half a request line are all closed after the header
/// timeout; and past the cap, a connection is closed at once, before any handshake.
#[test]
fn an_https_listener_closes_half_open_connections_and_holds_its_cap() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    use tideway_serve::listen::Limits;

    let dir = test_dir("half-open");
    let ca = certs::make_ca(&dir).unwrap();
    let cert = certs::issue(&dir, "server", &["localhost"], &[]).unwrap();
    let tls = std::sync::Arc::new(tideway_serve::tls::Tls::load(&cert.cert, &cert.key).unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits {
        header_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_secs(30),
        max_connections: 3,
        refused: Default::default(),
    };
    let refused = limits.refused.clone();
    let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    runtime.spawn(tideway_serve::listen::serve(listener, Some(tls), router, limits, std::future::pending()));

    // Whether the server closed `c` within `within` (end of stream or reset).
    let closed_within = |c: &mut std::net::TcpStream, within: Duration| {
        c.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 512];
        let started = Instant::now();
        loop {
            match c.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) if started.elapsed() < within => {}
                Ok(_) => return false,
                Err(e) => {
                    return !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    );
                }
            }
        }
    };
    let silent = std::net::TcpStream::connect(addr).unwrap();
    let mut started = std::net::TcpStream::connect(addr).unwrap();
    started.write_all(&[0x16]).unwrap();
    // A whole handshake, then half a request line (`-quiet` ignores the end of its input: it
    // holds the connection until the server closes it).
    let mut half = Command::new("sh")
        .args(["-c", &format!(
            "printf 'GET / HT' | openssl s_client -quiet -connect {addr} -servername localhost -CAfile {} >/dev/null 2>&1",
            path(&ca)
        )])
        .spawn()
        .expect("openssl");
    std::thread::sleep(Duration::from_millis(200));
    assert!(matches!(half.try_wait(), Ok(None)), "the handshaken client is held before the timeout");
    let mut extra = std::net::TcpStream::connect(addr).unwrap();
    assert!(closed_within(&mut extra, Duration::from_millis(300)), "a fourth connection is served");
    assert_eq!(refused.get(), 1, "counted");
    for (mut c, what) in [(silent, "a silent client"), (started, "a handshake never finished")] {
        assert!(closed_within(&mut c, Duration::from_secs(3)), "{what} is still held");
    }
    let finished = eventually(patience(5.0), || match half.try_wait() {
        Ok(Some(_)) => Ok(()),
        _ => Err("still connected".to_string()),
    });
    let _ = half.kill();
    finished.expect("a handshaken client with half a request line is closed");
    std::fs::remove_dir_all(&dir).unwrap();
}
