//! Each BGP kind, Tideway's and MetalLB's, as one [`BgpObject`] of the cluster state.

use kube::Resource;
use tideway_core::cluster::{BgpKind, BgpObject, BgpSpec};

use super::super::metallb::{MetalLbBfdProfile, MetalLbBgpAdvertisement, MetalLbBgpPeer, MetalLbCommunity};
use super::{
    BFDProfile, BGPAdvertisement, BGPPeer, Community, Source, bfd_profile, bgp_advertisement, bgp_peer,
    community_aliases,
};
use crate::error::ConvertError;

/// A BGP kind of either source.
pub trait BgpResource: Resource {
    /// Which kind it is.
    const KIND: BgpKind;
    /// Whose kind it is.
    const SOURCE: Source;

    /// The object, converted and checked.
    fn bgp_object(&self) -> Result<BgpObject, ConvertError>;
}

macro_rules! bgp_resource {
    ($($t:ty => $kind:ident, $source:ident, $variant:ident, $convert:ident;)*) => {$(
        impl BgpResource for $t {
            const KIND: BgpKind = BgpKind::$kind;
            const SOURCE: Source = Source::$source;

            fn bgp_object(&self) -> Result<BgpObject, ConvertError> {
                let meta = &self.metadata;
                let spec = BgpSpec::$variant($convert(Source::$source, meta, &self.spec)?);
                let name = meta.name.clone().unwrap_or_default();
                let namespace = match Source::$source {
                    Source::Tideway => String::new(),
                    Source::MetalLb => meta.namespace.clone().unwrap_or_else(|| "default".into()),
                };
                Ok(BgpObject { namespace, name, spec })
            }
        }
    )*};
}

bgp_resource! {
    BGPPeer => Peer, Tideway, Peer, bgp_peer;
    BGPAdvertisement => Advertisement, Tideway, Advertisement, bgp_advertisement;
    BFDProfile => BfdProfile, Tideway, BfdProfile, bfd_profile;
    Community => Community, Tideway, Community, community_aliases;
    MetalLbBgpPeer => Peer, MetalLb, Peer, bgp_peer;
    MetalLbBgpAdvertisement => Advertisement, MetalLb, Advertisement, bgp_advertisement;
    MetalLbBfdProfile => BfdProfile, MetalLb, BfdProfile, bfd_profile;
    MetalLbCommunity => Community, MetalLb, Community, community_aliases;
}
