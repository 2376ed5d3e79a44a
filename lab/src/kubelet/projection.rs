//! Filling a pod's volumes from the API with the node's own credentials, as kubelet does:
//! ConfigMaps and Secrets the pod names (the Node authorizer lets a node read those of its
//! pods only), downward-API files, and ServiceAccount tokens from the TokenRequest API bound to
//! the Pod (`boundObjectRef` with its UID), rewritten at 80 % of their lifetime or at the
//! configured rotation period.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount, Volume};
use kube::api::{Api, PostParams};

use super::env::{Runtime, field_ref};
use super::volumes::{File, Payload, VolumeError, host_path, key_files, volume_dir, write_atomically};

/// kubelet's default mode for API volume files (0644).
const DEFAULT_MODE: u32 = 0o644;

/// A token handed out and when to ask for the next.
#[derive(Debug, Clone)]
struct Token {
    token: String,
    refresh_at: Instant,
}

/// A pod's volumes as last written, and its tokens.
#[derive(Debug, Default)]
pub struct Volumes {
    written: BTreeMap<String, Payload>,
    tokens: BTreeMap<String, Token>,
    prepared: bool,
}

/// When a token lasting `lifetime` is to be replaced: at 80 % of it, or after `rotation`.
pub fn refresh_after(lifetime: Duration, rotation: Option<Duration>) -> Duration {
    rotation.unwrap_or(lifetime.mul_f64(0.8))
}

struct Ctx<'a> {
    client: &'a kube::Client,
    pod: &'a Pod,
    ns: String,
    rt: &'a Runtime,
    rotation: Option<Duration>,
}

impl Volumes {
    /// The earliest time a token is due.
    pub fn next_token_refresh(&self) -> Option<Instant> {
        self.tokens.values().map(|t| t.refresh_at).min()
    }

    /// Makes every volume of `pod` under `pod_dir` (emptyDirs and hostPaths once) and writes
    /// each API volume whose files changed; tokens are asked for when due.
    pub async fn sync(
        &mut self,
        client: &kube::Client,
        pod: &Pod,
        pod_dir: &Path,
        state: &Path,
        rt: &Runtime,
        rotation: Option<Duration>,
    ) -> Result<(), VolumeError> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let ctx = Ctx { client, pod, ns, rt, rotation };
        let fs_group = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|c| c.fs_group)
            .map(|g| g as u32);
        for v in pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default() {
            let dir = volume_dir(pod_dir, &v.name);
            if !self.prepared {
                prepare_local(v, &dir, state)?;
                if let (Some(g), Some(_)) = (fs_group, &v.empty_dir) {
                    set_ownership(&dir, g, false)?;
                }
            }
            let Some(payload) = self.payload(&ctx, v).await? else { continue };
            if self.written.get(&v.name) != Some(&payload) {
                write_atomically(&dir, &payload)?;
                if let Some(g) = fs_group {
                    set_ownership(&dir, g, true)?;
                }
                self.written.insert(v.name.clone(), payload);
            }
        }
        self.prepared = true;
        Ok(())
    }

    async fn payload(&mut self, ctx: &Ctx<'_>, v: &Volume) -> Result<Option<Payload>, VolumeError> {
        let missing = |what: String| VolumeError::Missing { volume: v.name.clone(), what };
        if let Some(cm) = &v.config_map {
            let mode = cm.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            let data = match get_config_map(ctx, &v.name, &cm.name).await? {
                Some(d) => d,
                None if cm.optional == Some(true) => BTreeMap::new(),
                None => return Err(missing(format!("configmap {:?}", cm.name))),
            };
            return key_files(&data, cm.items.as_deref(), mode).map(Some).map_err(missing);
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let mode = s.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            let data = match get_secret(ctx, &v.name, &name).await? {
                Some(d) => d,
                None if s.optional == Some(true) => BTreeMap::new(),
                None => return Err(missing(format!("secret {name:?}"))),
            };
            return key_files(&data, s.items.as_deref(), mode).map(Some).map_err(missing);
        }
        if let Some(d) = &v.downward_api {
            let mode = d.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            return downward(ctx, &v.name, d.items.as_deref().unwrap_or_default(), mode).map(Some);
        }
        if let Some(p) = &v.projected {
            let mode = p.default_mode.map_or(DEFAULT_MODE, |m| m as u32);
            let mut out = Payload::new();
            for src in p.sources.as_deref().unwrap_or_default() {
                if let Some(t) = &src.service_account_token {
                    let key = format!("{}/{}", v.name, t.path);
                    let token =
                        self.token(ctx, &key, &v.name, t.audience.clone(), t.expiration_seconds).await?;
                    out.insert(t.path.clone(), File { data: token.into_bytes(), mode });
                }
                if let Some(cm) = &src.config_map {
                    match get_config_map(ctx, &v.name, &cm.name).await? {
                        Some(data) => {
                            out.extend(key_files(&data, cm.items.as_deref(), mode).map_err(missing)?)
                        }
                        None if cm.optional == Some(true) => {}
                        None => return Err(missing(format!("configmap {:?}", cm.name))),
                    }
                }
                if let Some(s) = &src.secret {
                    match get_secret(ctx, &v.name, &s.name).await? {
                        Some(data) => {
                            out.extend(key_files(&data, s.items.as_deref(), mode).map_err(missing)?)
                        }
                        None if s.optional == Some(true) => {}
                        None => return Err(missing(format!("secret {:?}", s.name))),
                    }
                }
                if let Some(d) = &src.downward_api {
                    out.extend(downward(ctx, &v.name, d.items.as_deref().unwrap_or_default(), mode)?);
                }
            }
            return Ok(Some(out));
        }
        if v.empty_dir.is_some() || v.host_path.is_some() {
            return Ok(None);
        }
        Err(VolumeError::Unsupported(v.name.clone()))
    }

    /// The token for `key`, asked for again when due.
    async fn token(
        &mut self,
        ctx: &Ctx<'_>,
        key: &str,
        volume: &str,
        audience: Option<String>,
        expiration: Option<i64>,
    ) -> Result<String, VolumeError> {
        if let Some(t) = self.tokens.get(key)
            && Instant::now() < t.refresh_at
        {
            return Ok(t.token.clone());
        }
        let spec = ctx.pod.spec.as_ref();
        let sa = spec.and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audience.into_iter().filter(|a| !a.is_empty()).collect(),
                expiration_seconds: Some(expiration.unwrap_or(3600)),
                bound_object_ref: Some(BoundObjectReference {
                    kind: Some("Pod".into()),
                    api_version: Some("v1".into()),
                    name: ctx.pod.metadata.name.clone(),
                    uid: ctx.pod.metadata.uid.clone(),
                }),
            },
            ..TokenRequest::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ctx.ns);
        let answer = api.create_token_request(&sa, &PostParams::default(), &request).await.map_err(|e| {
            VolumeError::Api { volume: volume.to_string(), message: format!("token of {sa}: {e}") }
        })?;
        let status = answer.status.ok_or_else(|| VolumeError::Api {
            volume: volume.to_string(),
            message: "a TokenRequest answered without a token".into(),
        })?;
        let granted = answer.spec.expiration_seconds.unwrap_or(3600).max(1) as u64;
        let refresh_at = Instant::now() + refresh_after(Duration::from_secs(granted), ctx.rotation);
        tracing::info!(pod = ?ctx.pod.metadata.name, volume, "service account token written");
        self.tokens.insert(key.to_string(), Token { token: status.token.clone(), refresh_at });
        Ok(status.token)
    }
}

fn api_error(volume: &str, e: kube::Error) -> VolumeError {
    VolumeError::Api { volume: volume.to_string(), message: e.to_string() }
}

async fn get_config_map(
    ctx: &Ctx<'_>,
    volume: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, VolumeError> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let Some(cm) = api.get_opt(name).await.map_err(|e| api_error(volume, e))? else { return Ok(None) };
    let mut out: BTreeMap<String, Vec<u8>> =
        cm.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
    out.extend(cm.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
    Ok(Some(out))
}

async fn get_secret(
    ctx: &Ctx<'_>,
    volume: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, VolumeError> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let Some(s) = api.get_opt(name).await.map_err(|e| api_error(volume, e))? else { return Ok(None) };
    let mut out: BTreeMap<String, Vec<u8>> =
        s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    out.extend(s.string_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
    Ok(Some(out))
}

fn downward(
    ctx: &Ctx<'_>,
    volume: &str,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    mode: u32,
) -> Result<Payload, VolumeError> {
    let mut out = Payload::new();
    for it in items {
        let Some(f) = &it.field_ref else {
            return Err(VolumeError::Api {
                volume: volume.to_string(),
                message: format!("{}: the lab's kubelet writes fieldRef items only", it.path),
            });
        };
        let value = field_ref(ctx.pod, &f.field_path, ctx.rt)
            .map_err(|e| VolumeError::Api { volume: volume.to_string(), message: e.to_string() })?;
        out.insert(
            it.path.clone(),
            File { data: value.into_bytes(), mode: it.mode.map_or(mode, |m| m as u32) },
        );
    }
    Ok(out)
}

/// Makes an emptyDir's directory, or a hostPath as its `type` asks (`FileOrCreate` makes an
/// empty file, the rest a directory when missing).
/// What kubelet does to a volume of a pod with an fsGroup: every file and directory (not
/// followed through symlinks) belongs to the group, which may read it (and write it, unless
/// `read_only`); directories get the setgid bit, so new files inherit the group.
pub fn set_ownership(dir: &Path, gid: u32, read_only: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(dir, None, Some(gid))?;
    let mut mask = if read_only { 0o440 } else { 0o660 };
    if meta.is_dir() {
        mask |= 0o2110;
        for e in std::fs::read_dir(dir)? {
            set_ownership(&e?.path(), gid, read_only)?;
        }
    }
    std::fs::set_permissions(
        dir,
        std::fs::Permissions::from_mode((meta.permissions().mode() | mask) & 0o7777),
    )
}

fn prepare_local(v: &Volume, dir: &Path, state: &Path) -> Result<(), VolumeError> {
    if v.empty_dir.is_some() || super::volumes::is_api_volume(v) {
        std::fs::create_dir_all(dir)?;
    }
    if let Some(hp) = &v.host_path {
        let path = host_path(state, &hp.path);
        let is_file = matches!(
            hp.type_.as_deref(),
            Some("FileOrCreate" | "File" | "Socket" | "CharDevice" | "BlockDevice")
        );
        if !path.exists() {
            if is_file {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
            } else {
                std::fs::create_dir_all(&path)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_fs_group_may_read_what_only_root_could() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = std::env::temp_dir().join(format!("tideway-fsgroup-{}", std::process::id()));
        let key = super::super::volumes::File { data: b"k".to_vec(), mode: 0o400 };
        write_atomically(&dir, &[("keys".to_string(), key)].into_iter().collect()).unwrap();
        set_ownership(&dir, 65532, true).unwrap();
        let file = std::fs::metadata(dir.join("keys")).unwrap();
        assert_eq!(
            (file.permissions().mode() & 0o7777, file.gid()),
            (0o440, 65532),
            "defaultMode 0400 + group read"
        );
        let top = std::fs::metadata(&dir).unwrap();
        assert_eq!(top.permissions().mode() & 0o2000, 0o2000, "setgid: new files keep the group");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tokens_are_replaced_at_four_fifths_of_their_life_or_at_the_rotation_period() {
        assert_eq!(refresh_after(Duration::from_secs(3600), None), Duration::from_secs(2880));
        assert_eq!(
            refresh_after(Duration::from_secs(3607), Some(Duration::from_secs(30))),
            Duration::from_secs(30)
        );
    }
}
