//! The landing of a watched kind whose model a namespace and a name identify, as a macro a
//! kind defined outside this crate (a test's) uses too.

/// Kinds whose model a namespace and a name identify (and how each reader trims it): what a
/// watch of them does to the state. A kind defined outside this crate (a test's) gets its
/// landing the same way, then is [`register`](super::register)ed.
#[macro_export]
macro_rules! watched_kind {
    ($($t:ty $(, trim: $trim:expr)?;)*) => {$(
        impl $crate::kube::Kind for $t {
            fn delete(state: &mut ::tideway_core::cluster::ClusterState, key: &$crate::ObjectKey) {
                let (namespace, name) = $crate::kube::state_names::<Self::Model>(key);
                state.delete::<Self::Model>(namespace, name);
            }
            fn current(
                state: &::tideway_core::cluster::ClusterState,
                key: &$crate::ObjectKey,
            ) -> Option<Self::Model> {
                let (namespace, name) = $crate::kube::state_names::<Self::Model>(key);
                state.get::<Self::Model>(namespace, name).cloned()
            }
            $(fn trim(m: &mut Self::Model, reader: $crate::kube::Reader) {
                ($trim)(m, reader)
            })?
        }
    )*};
}
