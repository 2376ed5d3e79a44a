//! BGP communities as the node decides them: an advertisement's names looked up in the
//! `Community` objects (the values and names themselves are [`crate::model::bgp`]'s). Names are
//! looked up when the node decides, so an advertisement and the `Community` it names can arrive
//! in any order.

use super::node::Conflict;
use crate::model::bgp::{BgpAdvertisement, Community, CommunityAlias, CommunityRef};

/// The values of `ad`'s communities, names looked up in `aliases`; a name none defines is left
/// out and named in `conflicts`.
pub(super) fn resolve(
    ad: &BgpAdvertisement,
    aliases: &[CommunityAlias],
    conflicts: &mut Vec<Conflict>,
) -> Vec<Community> {
    let mut out = Vec::new();
    for c in &ad.communities {
        match c {
            CommunityRef::Value(v) => out.push(v.clone()),
            CommunityRef::Name(name) => match aliases.iter().find(|a| &a.name == name) {
                Some(alias) => out.push(alias.value.clone()),
                None => conflicts
                    .push(Conflict::UnknownCommunity { advertisement: ad.name.clone(), name: name.clone() }),
            },
        }
    }
    out
}
