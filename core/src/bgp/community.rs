//! BGP communities: the values, as MetalLB writes them, and the names `Community` objects give
//! them. An advertisement may list either; names are looked up when the node decides, so an
//! advertisement and the `Community` it names can arrive in any order.

use super::{BgpAdvertisement, Conflict};

/// A BGP community value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Community {
    /// A standard community, `ASN:VALUE` (two 16-bit halves).
    Standard(u16, u16),
    /// A large community, `large:GLOBAL:LOCAL1:LOCAL2` (RFC 8092).
    Large(u32, u32, u32),
}

impl std::fmt::Display for Community {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Community::Standard(a, b) => write!(f, "{a}:{b}"),
            Community::Large(a, b, c) => write!(f, "{a}:{b}:{c}"),
        }
    }
}

impl std::str::FromStr for Community {
    type Err = BadCommunity;

    /// `1234:1`, or `large:1:2:3`, as MetalLB writes them.
    fn from_str(s: &str) -> Result<Community, BadCommunity> {
        let bad = || BadCommunity(s.to_string());
        if let Some(large) = s.strip_prefix("large:") {
            let parts: Vec<u32> =
                large.split(':').map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
            return match parts[..] {
                [a, b, c] => Ok(Community::Large(a, b, c)),
                _ => Err(bad()),
            };
        }
        let (a, b) = s.split_once(':').ok_or_else(bad)?;
        Ok(Community::Standard(a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
    }
}

/// A community that is neither `A:B` with 16-bit halves nor `large:A:B:C` with 32-bit parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a community: ASN:VALUE (16 bits each) or large:GLOBAL:LOCAL1:LOCAL2 (32 bits each)")]
pub struct BadCommunity(pub String);

/// One entry of an advertisement's `communities`: a value, or the name of one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommunityRef {
    /// `65535:65282`, `large:1:2:3`.
    Value(Community),
    /// A name a `Community` object defines.
    Name(String),
}

impl std::str::FromStr for CommunityRef {
    type Err = BadCommunity;

    /// A value when it parses as one; a name when it has no `:` (a value written wrong, with
    /// a `:`, is refused rather than taken for a name).
    fn from_str(s: &str) -> Result<CommunityRef, BadCommunity> {
        match s.parse() {
            Ok(value) => Ok(CommunityRef::Value(value)),
            Err(_) if !s.contains(':') && !s.is_empty() => Ok(CommunityRef::Name(s.to_string())),
            Err(e) => Err(e),
        }
    }
}

impl From<Community> for CommunityRef {
    fn from(value: Community) -> Self {
        CommunityRef::Value(value)
    }
}

/// A name for a community value (one entry of a `Community` object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommunityAlias {
    /// The name.
    pub name: String,
    /// Its value.
    pub value: Community,
}

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
