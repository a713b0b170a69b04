//! Topologies as the transport's shapes, and what a sparse shape
//! refuses: words the group and the node both speak (a leaf, so that
//! neither reaches into the other for them).

use meshwork_collectives::Topology;
use meshwork_transport::Shape;

/// Why `what` is refused on a sparse topology.
pub(crate) fn sparse_cannot(what: &str) -> String {
    format!(
        "{what} is not supported on a sparse topology (kregular, hypercube): its routes pass through the failed ranks and are not rerouted; use a mesh, a star or a tree, or RECOVERY=abort"
    )
}

/// Why `grow` is refused on a tree.
pub(crate) fn tree_cannot_grow() -> String {
    "grow is not supported on a tree topology: new ranks would need places in the tree and links to their parents; use a mesh or a star".into()
}

/// Whether a shape's routes are fixed through relays that failures do not
/// change: a sparse shape other than a tree (a tree routes around a
/// failed rank, its children re-attaching to the nearest live ancestor).
pub(crate) fn fixed_routes(shape: Shape) -> bool {
    shape.is_sparse() && !matches!(shape, Shape::Tree { .. })
}

/// The transport's shape for a topology.
pub(crate) fn shape_of(topology: Topology) -> Shape {
    match topology {
        Topology::Mesh => Shape::Mesh,
        Topology::Star => Shape::Star,
        Topology::KRegular { degree } => Shape::KRegular { degree },
        Topology::Hypercube => Shape::Hypercube,
        Topology::Tree { fanout } => Shape::Tree { fanout },
    }
}
