//! The lab's throwaway certificate authority and its components' server certificates, made
//! with the `openssl` command at `lab up` (ECDSA P-256, valid 30 days, keys readable by root
//! only). The components serve their REST APIs over HTTPS with them; clients trust the CA
//! (`tideway status --lab NAME` finds it, `curl --cacert DIR/tls/ca.crt`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How long the lab's certificates are valid (a lab lives hours, not months).
const DAYS: &str = "30";

/// Why a certificate was not made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// `openssl` could not be run, or a file not written.
    #[error("making certificates with openssl: {0}")]
    Io(#[from] std::io::Error),
    /// `openssl` refused.
    #[error("openssl could not make {what}: {stderr}")]
    Refused {
        /// The certificate.
        what: String,
        /// What openssl said.
        stderr: String,
    },
}

/// A server's certificate and key files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

fn tls_dir(dir: &Path) -> PathBuf {
    dir.join("tls")
}

/// The CA certificate of the lab in `dir`: what clients verify the components with.
pub fn ca_path(dir: &Path) -> PathBuf {
    tls_dir(dir).join("ca.crt")
}

/// The certificate of the component `name` (`operator`, `agent-node-a`, `dns`) in `dir`.
pub fn issued(dir: &Path, name: &str) -> Issued {
    let d = tls_dir(dir);
    Issued { cert: d.join(format!("{name}.crt")), key: d.join(format!("{name}.key")) }
}

fn openssl(what: &str, args: &[&str]) -> Result<(), CertError> {
    let out = Command::new("openssl").args(args).output()?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(CertError::Refused { what: what.to_string(), stderr })
}

fn private(path: &Path) -> Result<(), CertError> {
    Ok(std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?)
}

fn new_key_args<'a>(key: &'a str, cert: &'a str, subject: &'a str) -> Vec<&'a str> {
    let key_type = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-noenc"];
    let mut args = vec!["req", "-x509"];
    args.extend(key_type);
    args.extend(["-keyout", key, "-out", cert, "-days", DAYS, "-subj", subject]);
    args
}

/// Makes a new CA in `dir`, replacing any earlier one (and so invalidating its certificates).
pub fn make_ca(dir: &Path) -> Result<PathBuf, CertError> {
    std::fs::create_dir_all(tls_dir(dir))?;
    let (cert, key) = (ca_path(dir), tls_dir(dir).join("ca.key"));
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    openssl("the lab's CA", &new_key_args(&k, &c, "/CN=tideway lab CA"))?;
    private(&key)?;
    Ok(cert)
}

/// Issues a server certificate for `name` from the CA in `dir`, carrying `dns_names` and
/// `ips` as subject alternative names (clients check those, not the common name).
pub fn issue(
    dir: &Path,
    name: &str,
    dns_names: &[&str],
    ips: &[std::net::IpAddr],
) -> Result<Issued, CertError> {
    let out = issued(dir, name);
    let (ca_cert, ca_key) =
        (ca_path(dir).display().to_string(), tls_dir(dir).join("ca.key").display().to_string());
    let (c, k) = (out.cert.display().to_string(), out.key.display().to_string());
    let sans: Vec<String> =
        dns_names.iter().map(|d| format!("DNS:{d}")).chain(ips.iter().map(|ip| format!("IP:{ip}"))).collect();
    let san = format!("subjectAltName={}", sans.join(","));
    let subject = format!("/CN={name}");
    let mut args = new_key_args(&k, &c, &subject);
    args.extend(["-CA", &ca_cert, "-CAkey", &ca_key, "-addext", &san]);
    args.extend(["-addext", "basicConstraints=critical,CA:FALSE", "-addext", "extendedKeyUsage=serverAuth"]);
    openssl(&format!("the certificate of {name}"), &args)?;
    private(&out.key)?;
    Ok(out)
}

/// What each component's certificate is for: its name in the lab, and the names it carries
/// (the lab's clients reach every API through a forward on 127.0.0.1). Every agent shares one,
/// as the agents of a cluster share one Secret.
pub const COMPONENTS: [(&str, &str); 3] =
    [("operator", "tideway-operator"), ("agent", "tideway-agent"), ("dns", "tideway-dns")];

/// A new CA in `dir` and a certificate from it for each of [`COMPONENTS`].
pub fn make_all(dir: &Path) -> Result<(), CertError> {
    make_ca(dir)?;
    let loopback = [std::net::IpAddr::from([127, 0, 0, 1])];
    for (name, server_name) in COMPONENTS {
        issue(dir, name, &[server_name, "localhost"], &loopback)?;
    }
    Ok(())
}

/// Whether the lab's API `label` (`operator`, `agent/NODE`, `dns`, `dns/metrics`...) is
/// served over HTTPS: the REST APIs are; probes and the DNS's `/metrics` stay plain.
pub fn is_https(label: &str) -> bool {
    label == "operator" || label == "dns" || (label.starts_with("agent/") && !label.ends_with("/healthz"))
}

/// The URL of `path` on the lab's API `label` forwarded to `addr`.
pub fn url(label: &str, addr: &str, path: &str) -> String {
    let scheme = if is_https(label) { "https" } else { "http" };
    format!("{scheme}://{addr}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_certificate_verifies_against_the_lab_ca_only() {
        let dir = std::env::temp_dir().join(format!("tideway-certs-{}", std::process::id()));
        let ca = make_ca(&dir).unwrap();
        let op = issue(&dir, "operator", &["localhost"], &["127.0.0.1".parse().unwrap()]).unwrap();
        let verify = |ca: &Path| {
            let args = ["verify", "-CAfile", &ca.display().to_string(), &op.cert.display().to_string()];
            Command::new("openssl").args(args).output().unwrap().status.success()
        };
        assert!(verify(&ca));
        assert_eq!(std::fs::metadata(&op.key).unwrap().permissions().mode() & 0o777, 0o600);
        let text =
            Command::new("openssl").args(["x509", "-noout", "-text", "-in"]).arg(&op.cert).output().unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("DNS:localhost, IP Address:127.0.0.1"), "{text}");
        // A new CA does not vouch for the old one's certificates.
        make_ca(&dir).unwrap();
        assert!(!verify(&ca));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_rest_apis_are_https_and_the_probes_plain() {
        assert_eq!(url("agent/n1", "127.0.0.1:1", "/api/v1/status"), "https://127.0.0.1:1/api/v1/status");
        assert_eq!(url("agent/n1/healthz", "127.0.0.1:1", "/healthz"), "http://127.0.0.1:1/healthz");
        assert!(is_https("operator") && is_https("dns"));
        assert!(!is_https("dns/metrics") && !is_https("dns/ready"));
    }
}
