//! A container whose image was loaded into the lab (`tideway lab load image`): its OCI spec
//! ([`super::oci`]) and runc bundle ([`super::runc`]), or the reason kubelet would give for not
//! starting it. `imagePullPolicy: Always` fails as a pull does: the lab has no registry.

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::config::KubeletConfig;
use super::mounts::Mount;
use super::oci::{self, Input};
use super::runc::Runc;
use crate::images::{Image, Store};

/// The loaded image `container` names, if any.
pub fn loaded(cfg: &KubeletConfig, container: &Container) -> Option<Image> {
    let dir = cfg.images_dir.as_ref()?;
    Store::new(dir).find(container.image.as_deref()?)
}

/// Where the pod's container runs.
pub struct Placement<'a> {
    /// The pod's directory.
    pub pod_dir: &'a Path,
    /// The pod's UID.
    pub uid: &'a str,
    /// The pod's network namespace (`None`: the node's).
    pub netns: Option<&'a Path>,
    /// Its host name (`None` on the host network).
    pub hostname: Option<&'a str>,
}

/// Why a container does not start: kubelet's reason and message.
pub type Refusal = (String, String);

/// Writes the bundle of `container` from `image`; the runc container to run, or why not.
pub fn bundle(
    cfg: &KubeletConfig,
    pod: &Pod,
    container: &Container,
    image: &Image,
    env: &[(String, String)],
    mounts: &[Mount],
    at: &Placement<'_>,
) -> Result<Runc, Refusal> {
    let refused = |reason: &str, message: String| (reason.to_string(), message);
    if container.image_pull_policy.as_deref() == Some("Always") {
        return Err(refused(
            "ErrImagePull",
            format!(
                "imagePullPolicy Always: the lab has no registry to pull {} from",
                container.image.as_deref().unwrap_or_default()
            ),
        ));
    }
    let runc = Runc::new(&cfg.state_dir.join("runc"), at.pod_dir, at.uid, &container.name);
    let read = |f: &str| std::fs::read_to_string(image.rootfs.join(f)).unwrap_or_default();
    let (passwd, group) = (read("etc/passwd"), read("etc/group"));
    let cgroups_path = format!("/tideway-lab/{}/{}", cfg.lab, runc.id);
    let rootfs = runc.rootfs();
    let input = Input {
        pod,
        container,
        image: &image.config,
        passwd: &passwd,
        group: &group,
        env,
        mounts,
        rootfs: &rootfs,
        netns: at.netns,
        hostname: at.hostname,
        node_name: &cfg.node_name,
        cgroups_path: &cgroups_path,
    };
    let spec = oci::spec(&input).map_err(|e| refused("CreateContainerConfigError", e.to_string()))?;
    runc.prepare(&image.rootfs, &spec).map_err(|e| refused("CreateContainerError", e.to_string()))?;
    Ok(runc)
}
