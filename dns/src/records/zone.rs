//! Zone names as the server takes them: lower-case and fully qualified, never the root.

use hickory_proto::rr::Name;

/// A zone name that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    /// Not a domain name.
    #[error("invalid zone {zone:?}: {reason}")]
    Invalid {
        /// What was given.
        zone: String,
        /// Why it is not a name.
        reason: String,
    },
    /// The root: every name would be ours.
    #[error("a zone cannot be the root")]
    Root,
}

/// Parses a zone name into its lower-case, fully qualified form.
pub fn parse_zone(zone: &str) -> Result<Name, ZoneError> {
    let mut name = Name::from_ascii(zone)
        .map_err(|e| ZoneError::Invalid { zone: zone.to_string(), reason: e.to_string() })?;
    name.set_fqdn(true);
    if name.is_root() {
        return Err(ZoneError::Root);
    }
    Ok(name.to_lowercase())
}
