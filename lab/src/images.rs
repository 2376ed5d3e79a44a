//! The lab's images: `tideway lab load image FILE` makes an OCI archive's image available to
//! every node of a lab, as `kind load image-archive` does, and the lab's kubelet runs a Pod
//! naming it as a container. No registry is ever asked: an image not loaded is not pulled.
//!
//! ```text
//!  <lab>/images/refs.json        reference -> image id (the manifest's digest)
//!  <lab>/images/ID/config.json   the image's configuration (Entrypoint, Cmd, Env, User, ...)
//!  <lab>/images/ID/rootfs/       its layers unpacked (read-only: each container gets an
//!                                overlay of its own above it)
//! ```
//!
//! skopeo reads the archive and umoci unpacks its layers (whiteouts and owners as a runtime's
//! snapshotter leaves them). The names an archive carries are `io.containerd.image.name` and
//! `org.opencontainers.image.ref.name` (when it is a whole reference, not a bare tag); `--name`
//! gives another.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// Why an image could not be loaded or read.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// A tool failed.
    #[error("{tool}: {message}")]
    Tool {
        /// The tool.
        tool: String,
        /// Its error output.
        message: String,
    },
    /// The archive carries no name, and none was given.
    #[error("{0}: the archive names no image (io.containerd.image.name); give one with --name")]
    Unnamed(PathBuf),
    /// A file of the archive or of the store.
    #[error("{0}")]
    Format(String),
    /// A file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What an image says about running it (the OCI image configuration's `config`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ImageConfig {
    /// `User`: `uid`, `uid:gid`, or names from the image's `/etc/passwd` and `/etc/group`.
    #[serde(default)]
    pub user: Option<String>,
    /// `Env` (`NAME=value`).
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// `Entrypoint`.
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    /// `Cmd`.
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    /// `WorkingDir`.
    #[serde(default)]
    pub working_dir: Option<String>,
}

/// A loaded image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Its id (the manifest digest's hex).
    pub id: String,
    /// Its unpacked layers.
    pub rootfs: PathBuf,
    /// Its configuration.
    pub config: ImageConfig,
}

/// A reference as the store keys it: Docker Hub's implicit `docker.io/` and `library/`
/// dropped, `:latest` when it has neither tag nor digest.
pub fn normalize(reference: &str) -> String {
    let r = reference.strip_prefix("docker.io/").unwrap_or(reference);
    let r = r.strip_prefix("library/").unwrap_or(r);
    let last = r.rsplit('/').next().unwrap_or(r);
    if last.contains(':') || r.contains('@') { r.to_string() } else { format!("{r}:latest") }
}

/// The names an OCI layout's `index.json` gives its image.
pub fn names_in_index(index: &serde_json::Value) -> Vec<String> {
    let mut names = Vec::new();
    for m in index["manifests"].as_array().into_iter().flatten() {
        for key in ["io.containerd.image.name", "org.opencontainers.image.ref.name"] {
            if let Some(n) = m["annotations"][key].as_str()
                && n.contains('/')
                && !names.contains(&n.to_string())
            {
                names.push(n.to_string());
            }
        }
    }
    names
}

/// A lab's image store.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store in `dir` (`<lab>/images`).
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    fn refs(&self) -> BTreeMap<String, String> {
        std::fs::read(self.dir.join("refs.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The names of every image loaded.
    pub fn names(&self) -> Vec<String> {
        self.refs().into_keys().collect()
    }

    /// The image `reference` names, if it was loaded.
    pub fn find(&self, reference: &str) -> Option<Image> {
        let id = self.refs().get(&normalize(reference))?.clone();
        let dir = self.dir.join(&id);
        let config: ImageConfig =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).ok()?).ok()?;
        Some(Image { rootfs: dir.join("rootfs"), id, config })
    }

    /// Loads the OCI archive `archive` under its own names and `extra`; returns the names.
    pub fn load(&self, archive: &Path, extra: &[String]) -> Result<Vec<String>, ImageError> {
        let index = tool("tar", &["-xOf".as_ref(), archive.as_os_str(), "index.json".as_ref()])?;
        let index: serde_json::Value =
            serde_json::from_slice(&index).map_err(|e| ImageError::Format(format!("index.json: {e}")))?;
        let mut names: Vec<String> =
            names_in_index(&index).into_iter().chain(extra.iter().cloned()).collect();
        if names.is_empty() {
            return Err(ImageError::Unnamed(archive.to_path_buf()));
        }
        names = names.iter().map(|n| normalize(n)).collect();
        names.dedup();
        let source = format!("oci-archive:{}", archive.display());
        let inspect = tool("skopeo", &["inspect".as_ref(), source.as_ref()])?;
        let digest = serde_json::from_slice::<serde_json::Value>(&inspect)
            .ok()
            .and_then(|v| v["Digest"].as_str().map(str::to_string))
            .ok_or_else(|| ImageError::Format("skopeo inspect: no Digest".into()))?;
        let id = digest.trim_start_matches("sha256:").to_string();
        let dir = self.dir.join(&id);
        if !dir.join("config.json").exists() {
            self.unpack(&source, &dir)?;
        }
        let mut refs = self.refs();
        for n in &names {
            refs.insert(n.clone(), id.clone());
        }
        let tmp = self.dir.join("refs.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&refs).map_err(std::io::Error::other)?)?;
        std::fs::rename(tmp, self.dir.join("refs.json"))?;
        Ok(names)
    }

    fn unpack(&self, source: &str, dir: &Path) -> Result<(), ImageError> {
        let work = self.dir.join(format!(".unpack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work)?;
        let layout = format!("{}:image", work.join("layout").display());
        let bundle = work.join("bundle");
        let run = || -> Result<Vec<u8>, ImageError> {
            tool(
                "skopeo",
                &["copy".as_ref(), "--quiet".as_ref(), source.as_ref(), format!("oci:{layout}").as_ref()],
            )?;
            tool("umoci", &["unpack".as_ref(), "--image".as_ref(), layout.as_ref(), bundle.as_os_str()])?;
            tool("skopeo", &["inspect".as_ref(), "--config".as_ref(), format!("oci:{layout}").as_ref()])
        };
        let result = run().and_then(|config| {
            let v: serde_json::Value = serde_json::from_slice(&config)
                .map_err(|e| ImageError::Format(format!("the image's configuration: {e}")))?;
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir)?;
            std::fs::rename(bundle.join("rootfs"), dir.join("rootfs"))?;
            let config = serde_json::to_vec_pretty(&v["config"]).map_err(std::io::Error::other)?;
            std::fs::write(dir.join("config.json"), config)?;
            Ok(())
        });
        let _ = std::fs::remove_dir_all(&work);
        result
    }
}

fn tool(name: &str, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>, ImageError> {
    let out = Command::new(name).args(args).output().map_err(|e| ImageError::Tool {
        tool: name.into(),
        message: format!("{e} (scripts/install-deps.sh installs it)"),
    })?;
    if !out.status.success() {
        return Err(ImageError::Tool {
            tool: name.into(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_keyed_as_a_runtime_resolves_them() {
        assert_eq!(normalize("ghcr.io/tideway-net/tideway:0.1.0"), "ghcr.io/tideway-net/tideway:0.1.0");
        assert_eq!(normalize("docker.io/library/busybox"), "busybox:latest");
        assert_eq!(normalize("localhost:5000/a/b"), "localhost:5000/a/b:latest", "a port is no tag");
        assert_eq!(normalize("a/b@sha256:00"), "a/b@sha256:00");
        let index = serde_json::json!({"manifests": [{"annotations": {
            "io.containerd.image.name": "ghcr.io/tideway-net/tideway:0.1.0",
            "org.opencontainers.image.ref.name": "0.1.0"}}]});
        assert_eq!(names_in_index(&index), ["ghcr.io/tideway-net/tideway:0.1.0"], "a bare tag is no name");
    }
}
