//! `v1/Secret` of type `kubernetes.io/basic-auth` -> [`BgpSecret`], for the BGP peers'
//! `passwordSecret`s (as MetalLB reads them): only the `password` key is kept.

use k8s_openapi::api::core::v1 as k8s;
use tideway_core::cluster::BgpSecret;

use crate::error::{ConvertError, Ctx};

/// The type of Secret a `passwordSecret` names.
pub const BASIC_AUTH: &str = "kubernetes.io/basic-auth";

/// The password of a `kubernetes.io/basic-auth` Secret; `Ok(None)` for Secrets of other types,
/// which are not read.
pub fn bgp_secret(s: &k8s::Secret) -> Result<Option<BgpSecret>, ConvertError> {
    if s.type_.as_deref() != Some(BASIC_AUTH) {
        return Ok(None);
    }
    let name = s.metadata.name.clone().unwrap_or_default();
    let cx = Ctx::new("Secret", s.metadata.namespace.as_deref(), &name);
    match s.data.as_ref().and_then(|d| d.get("password")).map(|b| String::from_utf8(b.0.clone())) {
        Some(Ok(password)) => match tideway_core::bgp::password_problem(&password) {
            None => Ok(Some(BgpSecret { name, password })),
            Some(why) => Err(cx.err("data.password", why)),
        },
        Some(Err(_)) => Err(cx.err("data.password", "is not UTF-8")),
        None => Err(cx.err("data.password", "is required in a kubernetes.io/basic-auth Secret")),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn secret(type_: &str, password: Option<&[u8]>) -> k8s::Secret {
        k8s::Secret {
            metadata: ObjectMeta {
                name: Some("bgp-auth".into()),
                namespace: Some("tideway-system".into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: password.map(|p| [("password".to_string(), ByteString(p.to_vec()))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_basic_auth_secrets_are_read_and_their_password_must_be_there() {
        let read = bgp_secret(&secret(BASIC_AUTH, Some(b"s3cret"))).unwrap().unwrap();
        assert_eq!((read.name.as_str(), read.password.as_str()), ("bgp-auth", "s3cret"));
        assert_eq!(bgp_secret(&secret("kubernetes.io/tls", None)), Ok(None));
        let missing = bgp_secret(&secret(BASIC_AUTH, None)).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "Secret tideway-system/bgp-auth: data.password: is required in a kubernetes.io/basic-auth Secret"
        );
        assert!(bgp_secret(&secret(BASIC_AUTH, Some(&[0xff]))).is_err());
        assert!(bgp_secret(&secret(BASIC_AUTH, Some(b""))).is_err());
    }

    /// A password FRR cannot carry is refused naming `data.password`, not showing it.
    #[test]
    fn a_password_frr_cannot_carry_is_refused_without_being_shown() {
        for bad in ["s3cret\nrouter bgp 1\n", "two words", "x".repeat(81).as_str()] {
            let e = bgp_secret(&secret(BASIC_AUTH, Some(bad.as_bytes()))).expect_err(bad).to_string();
            assert!(e.starts_with("Secret tideway-system/bgp-auth: data.password: "), "{e}");
            assert!(!e.contains(bad.trim_end()), "the password is shown: {e}");
        }
    }
}
