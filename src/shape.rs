//! Topologies as the transport's shapes, and what a sparse shape
//! refuses: words the group and the node both speak (a leaf, so that
//! neither reaches into the other for them).

use meshwork_collectives::Topology;
use meshwork_transport::Shape;

/// Why `what` is refused on a sparse topology.
pub(crate) fn sparse_cannot(what: &str) -> String {
    format!(
        "{what} is not supported on a sparse topology (kregular, hypercube, tree): its routes pass through the failed ranks and are not rerouted; use a mesh or a star, or RECOVERY=abort"
    )
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
