//! Settings: what the command line gives, optionally overridden by a settings file that is
//! re-read when it changes (CoreDNS's `reload`): a bad file keeps the previous settings.
//!
//! The settings file is YAML; every field is optional:
//!
//! ```yaml
//! ttl: 30                      # record TTL, 0..=3600 (CoreDNS `ttl`)
//! pods: insecure               # disabled | insecure | verified
//! dnsService: kube-system/kube-dns
//! externalZone: example.org    # LoadBalancer and external IPs (CoreDNS `k8s_external`)
//! externalTtl: 5
//! upstreams: [10.0.0.2, "10.0.0.3:5353"]   # instead of the resolv.conf
//! resolvConf: /etc/resolv.conf
//! forward: {timeout: 2s, maxConcurrent: 1000, maxConcurrentPerClient: 100,
//!           healthCheck: 500ms, maxFails: 2, randomizeCase: true}
//! cache: {success: 9984, denial: 9984, successBytes: 8Mi, denialBytes: 2Mi,
//!         successMaxTtl: 3600, denialMaxTtl: 1800, minTtl: 5, servfailTtl: 5,
//!         prefetch: 0, prefetchPercentage: 10, serveStale: 1h}
//! shuffle: true                # loadbalance round_robin
//! refuseAny: true
//! lameduck: 5s
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hickory_proto::rr::Name;
use serde::Deserialize;
use tideway_api::duration::parse_duration;
use tideway_core::model::ServiceName;

use crate::forward::cache::CacheSettings;
use crate::forward::{ForwardSettings, parse_resolv_conf};
use crate::handler::Options;
use crate::records::{ExternalZone, Fallthrough, IndexSettings, PodsMode, ZoneError, parse_zone};

/// Everything about serving that can change without restarting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The cluster zone's index.
    pub index: IndexSettings,
    /// Forwarding.
    pub forward: ForwardSettings,
    /// Where upstreams come from when not listed explicitly.
    pub resolv_conf: Option<PathBuf>,
    /// The cache.
    pub cache: CacheSettings,
    /// Query-path options.
    pub options: Options,
    /// How long to keep serving after a shutdown request (with `/ready` failing).
    pub lameduck: Duration,
}

impl Settings {
    /// Defaults for `zone`.
    pub fn new(zone: &str) -> Result<Self, ConfigError> {
        Ok(Settings {
            index: IndexSettings::new(zone)?,
            forward: ForwardSettings::default(),
            resolv_conf: None,
            cache: CacheSettings::default(),
            options: Options::default(),
            lameduck: Duration::from_secs(5),
        })
    }

    /// Reads the upstreams from the resolv.conf when none are listed explicitly.
    pub fn resolve_upstreams(&mut self, explicit: &[SocketAddr]) -> Result<(), ConfigError> {
        if !explicit.is_empty() {
            self.forward.upstreams = explicit.to_vec();
            return Ok(());
        }
        if let Some(path) = &self.resolv_conf {
            let text =
                std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.clone(), e.to_string()))?;
            self.forward.upstreams = parse_resolv_conf(&text);
            if self.forward.upstreams.is_empty() {
                tracing::warn!(file = %path.display(), "no nameserver in the resolv.conf; names outside the cluster will fail");
            }
        }
        Ok(())
    }
}

/// A settings problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A file could not be read.
    #[error("cannot read {path}: {1}", path = .0.display())]
    Read(PathBuf, String),
    /// A file is not valid YAML for the settings.
    #[error("{path}: {1}", path = .0.display())]
    Parse(PathBuf, String),
    /// A value is out of range or malformed.
    #[error("{0}")]
    Invalid(String),
    /// A zone name is not one.
    #[error(transparent)]
    Zone(#[from] ZoneError),
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileSettings {
    ttl: Option<u32>,
    pods: Option<String>,
    dns_service: Option<String>,
    external_zone: Option<String>,
    external_ttl: Option<u32>,
    upstreams: Option<Vec<String>>,
    resolv_conf: Option<PathBuf>,
    forward: Option<FileForward>,
    cache: Option<FileCache>,
    shuffle: Option<bool>,
    refuse_any: Option<bool>,
    lameduck: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileForward {
    timeout: Option<String>,
    max_concurrent: Option<usize>,
    max_concurrent_per_client: Option<usize>,
    health_check: Option<String>,
    max_fails: Option<u32>,
    randomize_case: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileCache {
    success: Option<usize>,
    denial: Option<usize>,
    success_bytes: Option<String>,
    denial_bytes: Option<String>,
    serve_stale: Option<String>,
    success_max_ttl: Option<u32>,
    denial_max_ttl: Option<u32>,
    min_ttl: Option<u32>,
    servfail_ttl: Option<u32>,
    prefetch: Option<u32>,
    prefetch_percentage: Option<u8>,
}

/// Parses an upstream: an address, with an optional port (`10.0.0.2`, `10.0.0.2:5353`, `[::1]:53`).
pub fn parse_upstream(s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse::<SocketAddr>()
        .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| ConfigError::Invalid(format!("invalid upstream {s:?} (ADDR or ADDR:PORT)")))
}

/// Parses `namespace/name`.
pub fn parse_service_name(s: &str) -> Result<ServiceName, ConfigError> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok(ServiceName::new(ns, name)),
        _ => Err(ConfigError::Invalid(format!("invalid Service {s:?} (namespace/name)"))),
    }
}

/// The external zone `zone` with `ttl`; it may neither be, hold nor sit inside a cluster zone
/// of `index`.
pub fn external_zone(zone: &str, ttl: u32, index: &IndexSettings) -> Result<ExternalZone, ConfigError> {
    let mut ext = ExternalZone::new(zone)?;
    if let Some(cluster) = index.cluster_zones().find(|c| ext.zone.zone_of(c) || c.zone_of(&ext.zone)) {
        return Err(ConfigError::Invalid(format!(
            "external zone {} overlaps the cluster zone {cluster}",
            ext.zone
        )));
    }
    ext.ttl = check_ttl(ttl)?;
    Ok(ext)
}

/// The cluster zones after `first`: each a zone name, none repeated.
pub fn extra_zones(zones: &[String], first: &Name) -> Result<Vec<Name>, ConfigError> {
    let mut out: Vec<Name> = Vec::new();
    for z in zones {
        let zone = parse_zone(z)?;
        if &zone == first || out.contains(&zone) {
            return Err(ConfigError::Invalid(format!("cluster zone {zone} is given twice")));
        }
        out.push(zone);
    }
    Ok(out)
}

/// `--fallthrough`: absent (never), without zones (every cluster zone) or with them.
pub fn fallthrough(zones: Option<&[String]>) -> Result<Fallthrough, ConfigError> {
    match zones {
        None => Ok(Fallthrough::Never),
        Some([]) => Ok(Fallthrough::Everywhere),
        Some(zones) => Ok(Fallthrough::In(zones.iter().map(|z| parse_zone(z)).collect::<Result<_, _>>()?)),
    }
}

/// Checks the TTL range CoreDNS allows.
pub fn check_ttl(ttl: u32) -> Result<u32, ConfigError> {
    if ttl > 3600 {
        return Err(ConfigError::Invalid(format!("ttl {ttl} is out of range 0..=3600")));
    }
    Ok(ttl)
}

fn duration(field: &str, s: &str) -> Result<Duration, ConfigError> {
    parse_duration(s).map_err(|e| ConfigError::Invalid(format!("{field}: {e}")))
}

/// A size in bytes: a number with an optional `Ki`, `Mi` or `Gi`.
pub fn parse_size(field: &str, value: &str) -> Result<usize, ConfigError> {
    let (digits, unit) = value.split_at(value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len()));
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        other => {
            return Err(ConfigError::Invalid(format!(
                "{field}: unknown unit {other:?} in {value:?} (Ki, Mi or Gi)"
            )));
        }
    };
    let n: usize =
        digits.parse().map_err(|_| ConfigError::Invalid(format!("{field}: invalid size {value:?}")))?;
    n.checked_mul(1 << shift).ok_or_else(|| ConfigError::Invalid(format!("{field}: {value:?} is too large")))
}

/// `base` with the fields set in the settings file `path` applied, upstreams resolved.
pub fn load_file(
    base: &Settings,
    path: &Path,
    explicit_upstreams: &[SocketAddr],
) -> Result<Settings, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.to_path_buf(), e.to_string()))?;
    let file: FileSettings = if text.trim().is_empty() {
        FileSettings::default()
    } else {
        serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse(path.to_path_buf(), e.to_string()))?
    };
    apply(base, file, explicit_upstreams)
}

fn apply(
    base: &Settings,
    f: FileSettings,
    explicit_upstreams: &[SocketAddr],
) -> Result<Settings, ConfigError> {
    let mut s = base.clone();
    if let Some(ttl) = f.ttl {
        s.index.ttl = check_ttl(ttl)?;
    }
    if let Some(p) = f.pods {
        s.index.pods = p.parse::<PodsMode>().map_err(|e| ConfigError::Invalid(e.to_string()))?;
    }
    if let Some(d) = f.dns_service {
        s.index.dns_service = Some(parse_service_name(&d)?);
    }
    if f.external_zone.is_some() || f.external_ttl.is_some() {
        let zone = match (&f.external_zone, &s.index.external) {
            (Some(z), _) => z.clone(),
            (None, Some(e)) => e.zone.to_string(),
            (None, None) => return Err(ConfigError::Invalid("externalTtl without externalZone".into())),
        };
        let ttl = f.external_ttl.or(s.index.external.as_ref().map(|e| e.ttl)).unwrap_or(5);
        s.index.external = Some(external_zone(&zone, ttl, &s.index)?);
    }
    if let Some(r) = f.resolv_conf {
        s.resolv_conf = Some(r);
    }
    if let Some(fw) = f.forward {
        if let Some(t) = fw.timeout {
            s.forward.timeout = duration("forward.timeout", &t)?;
        }
        if let Some(m) = fw.max_concurrent {
            s.forward.max_concurrent = m;
        }
        if let Some(m) = fw.max_concurrent_per_client {
            s.forward.max_concurrent_per_client = m;
        }
        if let Some(h) = fw.health_check {
            s.forward.health_check = duration("forward.healthCheck", &h)?.max(Duration::from_millis(10));
        }
        s.forward.max_fails = fw.max_fails.unwrap_or(s.forward.max_fails);
        s.forward.randomize_case = fw.randomize_case.unwrap_or(s.forward.randomize_case);
    }
    if let Some(c) = f.cache {
        let cs = &mut s.cache;
        cs.success_capacity = c.success.unwrap_or(cs.success_capacity);
        cs.denial_capacity = c.denial.unwrap_or(cs.denial_capacity);
        if let Some(b) = c.success_bytes {
            cs.success_bytes = parse_size("cache.successBytes", &b)?;
        }
        if let Some(b) = c.denial_bytes {
            cs.denial_bytes = parse_size("cache.denialBytes", &b)?;
        }
        if let Some(d) = c.serve_stale {
            cs.serve_stale = duration("cache.serveStale", &d)?;
        }
        cs.success_max_ttl = c.success_max_ttl.unwrap_or(cs.success_max_ttl);
        cs.denial_max_ttl = c.denial_max_ttl.unwrap_or(cs.denial_max_ttl);
        cs.min_ttl = c.min_ttl.unwrap_or(cs.min_ttl);
        cs.servfail_ttl = c.servfail_ttl.unwrap_or(cs.servfail_ttl);
        cs.prefetch_hits = c.prefetch.unwrap_or(cs.prefetch_hits);
        cs.prefetch_percentage = c.prefetch_percentage.unwrap_or(cs.prefetch_percentage).min(100);
    }
    if let Some(v) = f.shuffle {
        s.options.shuffle = v;
    }
    if let Some(v) = f.refuse_any {
        s.options.refuse_any = v;
    }
    if let Some(l) = f.lameduck {
        s.lameduck = duration("lameduck", &l)?;
    }
    let listed: Vec<SocketAddr> = match f.upstreams {
        Some(list) => list.iter().map(|u| parse_upstream(u)).collect::<Result<_, _>>()?,
        None => explicit_upstreams.to_vec(),
    };
    s.resolve_upstreams(&listed)?;
    Ok(s)
}

/// Where settings come from: a base (the command line), an optional settings file, and the
/// resolv.conf. [`SettingsSource::load`] combines them; [`SettingsSource::fingerprint`]
/// tells when either file changed.
#[derive(Debug, Clone)]
pub struct SettingsSource {
    /// Settings from the command line.
    pub base: Settings,
    /// The settings file, if any.
    pub file: Option<PathBuf>,
    /// Upstreams given on the command line (they win over the resolv.conf).
    pub upstreams: Vec<SocketAddr>,
}

/// Modification time and length of the files settings are read from.
pub type Fingerprint = Vec<Option<(std::time::SystemTime, u64)>>;

impl SettingsSource {
    /// The effective settings.
    pub fn load(&self) -> Result<Settings, ConfigError> {
        match &self.file {
            Some(path) => load_file(&self.base, path, &self.upstreams),
            None => {
                let mut s = self.base.clone();
                s.resolve_upstreams(&self.upstreams)?;
                Ok(s)
            }
        }
    }

    /// Changes whenever the settings file or the resolv.conf in use changes.
    pub fn fingerprint(&self, current: &Settings) -> Fingerprint {
        let stat = |p: &Path| {
            let md = std::fs::metadata(p).ok()?;
            Some((md.modified().ok()?, md.len()))
        };
        [self.file.as_deref(), current.resolv_conf.as_deref()].into_iter().flatten().map(stat).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Settings, ConfigError> {
        let base = Settings::new("cluster.local").unwrap();
        let file: FileSettings =
            serde_saphyr::from_str(yaml).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        apply(&base, file, &[])
    }

    #[test]
    fn file_fields_override_the_base() {
        let s = parse(
            "ttl: 30\npods: insecure\nupstreams: [10.0.0.2, '10.0.0.3:5353']\n\
             cache: {success: 100, prefetch: 3, successBytes: 1Mi, serveStale: 0s}\n\
             lameduck: 10s\nrefuseAny: false\ndnsService: dns/coredns\n\
             forward: {timeout: 500ms, maxConcurrentPerClient: 20, maxFails: 0, randomizeCase: false}\n",
        )
        .unwrap();
        assert_eq!(s.index.ttl, 30);
        assert_eq!(s.index.pods, PodsMode::Insecure);
        assert_eq!(s.index.dns_service, Some(ServiceName::new("dns", "coredns")));
        let ups: Vec<String> = s.forward.upstreams.iter().map(ToString::to_string).collect();
        assert_eq!(ups, ["10.0.0.2:53", "10.0.0.3:5353"]);
        assert_eq!(
            (s.cache.success_capacity, s.cache.denial_capacity, s.cache.prefetch_hits),
            (100, 9984, 3)
        );
        assert_eq!(s.lameduck, Duration::from_secs(10));
        assert_eq!(s.forward.timeout, Duration::from_millis(500));
        assert_eq!((s.forward.max_concurrent_per_client, s.forward.max_fails), (20, 0));
        assert!(!s.forward.randomize_case);
        assert_eq!(s.forward.health_check, Duration::from_millis(500), "the default");
        assert_eq!((s.cache.success_bytes, s.cache.denial_bytes), (1 << 20, 2 << 20));
        assert_eq!(s.cache.serve_stale, Duration::ZERO);
        assert!(!s.options.refuse_any && s.options.shuffle);
    }

    #[test]
    fn the_source_combines_base_file_and_resolv_conf() {
        let dir = std::env::temp_dir().join(format!("tideway-dns-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let resolv = dir.join("resolv.conf");
        std::fs::write(&resolv, "nameserver 192.0.2.53\n").unwrap();
        let mut base = Settings::new("cluster.local").unwrap();
        base.resolv_conf = Some(resolv.clone());
        let mut source = SettingsSource { base, file: None, upstreams: Vec::new() };
        let s = source.load().unwrap();
        assert_eq!(s.forward.upstreams, vec!["192.0.2.53:53".parse().unwrap()]);
        let before = source.fingerprint(&s);
        std::fs::write(&resolv, "nameserver 192.0.2.54\nnameserver 192.0.2.55\n").unwrap();
        assert_ne!(source.fingerprint(&s), before, "a resolv.conf edit is noticed");
        let file = dir.join("dns.yaml");
        std::fs::write(&file, "ttl: 30\n").unwrap();
        source.file = Some(file.clone());
        let s = source.load().unwrap();
        assert_eq!((s.index.ttl, s.forward.upstreams.len()), (30, 2));
        std::fs::write(&file, "ttl: [oops\n").unwrap();
        assert!(matches!(source.load(), Err(ConfigError::Parse(..))));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bad_values_are_rejected_with_their_field() {
        assert!(parse("ttl: 4000\n").unwrap_err().to_string().contains("out of range"));
        assert!(parse("pods: maybe\n").unwrap_err().to_string().contains("unknown pods mode"));
        assert!(parse("upstreams: [nope]\n").unwrap_err().to_string().contains("invalid upstream"));
        assert!(parse("lameduck: soon\n").unwrap_err().to_string().contains("lameduck"));
        assert!(
            parse("cache: {successBytes: 8MB}\n").unwrap_err().to_string().contains("cache.successBytes")
        );
        assert!(parse("ttl: 5\nunknown: 1\n").is_err(), "unknown fields are errors");
        let overlap = parse("externalZone: svc.cluster.local\n").unwrap_err().to_string();
        assert!(overlap.contains("overlaps the cluster zone"), "{overlap}");
        assert!(parse("externalZone: local\n").is_err(), "a zone holding the cluster zone");
        assert!(parse("externalTtl: 30\n").unwrap_err().to_string().contains("without externalZone"));
        assert!(parse("externalZone: example.org\nexternalTtl: 9999\n").is_err());
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("b", "16Mi").unwrap(), 16 << 20);
        assert_eq!(parse_size("b", "512Ki").unwrap(), 512 << 10);
        assert_eq!(parse_size("b", "1000").unwrap(), 1000);
        assert!(parse_size("b", "16MB").unwrap_err().to_string().contains("unknown unit"));
        assert!(parse_size("b", "Mi").is_err());
    }

    #[test]
    fn the_external_zone_comes_from_the_file() {
        let s = parse("externalZone: Example.ORG\nexternalTtl: 30\n").unwrap();
        let ext = s.index.external.unwrap();
        assert_eq!((ext.zone.to_string().as_str(), ext.ttl), ("example.org.", 30));
    }
}
