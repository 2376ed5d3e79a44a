//! Which objects keep their last valid version when a source that reads everything at once
//! finds their new one invalid: the one rule every [`Store`](super::Store) applies.

use std::collections::BTreeSet;

use tideway_api::manifest::ObjectRef;

/// The objects named in `keep`, as a test of (kind, namespace, name): a name read without a
/// namespace (the reader could not tell it) matches in any namespace.
pub fn kept_by(keep: &[ObjectRef]) -> impl Fn(&str, Option<&str>, &str) -> bool + '_ {
    let wanted: BTreeSet<(&str, Option<&str>, &str)> =
        keep.iter().map(|o| (o.kind.as_str(), o.namespace.as_deref(), o.name.as_str())).collect();
    move |kind, namespace, name| {
        wanted.contains(&(kind, namespace, name)) || wanted.contains(&(kind, None, name))
    }
}
