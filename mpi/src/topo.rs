//! Virtual topologies (MPI-5 §8): a communicator that knows a grid or a
//! graph of its ranks. `MPI_Cart_create` makes one of the first `∏ dims`
//! ranks, and the stencil codes' helpers answer from it — coordinates,
//! ranks, the neighbours one shift away (`MPI_PROC_NULL` past a
//! non-periodic edge) and sub-grids. `MPI_Graph_create` and the
//! distributed graphs (`MPI_Dist_graph_create(_adjacent)`) keep each
//! rank's neighbours for the queries. Ranks keep their order (a grid is
//! row-major, the last dimension fastest): meshwork's links are alike
//! between any two ranks of a host, and across hosts it has no map of the
//! network to reorder by. [`neighbourhood`] gives the neighbourhood
//! collectives (`coll/neighbour.rs`) each rank's sources and destinations.

use crate::consts::*;
use crate::env::split;
use crate::state::{comm, entry, Comm, Fail, Result};
use crate::{put, Handle};
use std::ffi::c_int;

/// A communicator's virtual topology.
#[derive(Clone, Debug)]
pub(crate) enum Topo {
    Cart(Cart),
    Graph(Graph),
    Dist(Dist),
}

/// A graph of all the communicator's ranks (`MPI_Graph_create`): node
/// `i`'s neighbours are `edges[index[i-1]..index[i]]`.
#[derive(Clone, Debug)]
pub(crate) struct Graph {
    pub index: Vec<c_int>,
    pub edges: Vec<c_int>,
}

/// This rank's part of a distributed graph: the ranks whose edges come in
/// and those its edges go to, with their weights if it has any.
#[derive(Clone, Debug)]
pub(crate) struct Dist {
    pub sources: Vec<(c_int, c_int)>,
    pub destinations: Vec<(c_int, c_int)>,
    pub weighted: bool,
}

/// A communicator's grid: the extent and periodicity of each dimension.
#[derive(Clone, Debug)]
pub(crate) struct Cart {
    pub dims: Vec<c_int>,
    pub periods: Vec<bool>,
}

impl Cart {
    /// The ranks the grid holds.
    fn size(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }

    /// The coordinates of `rank`, row-major.
    fn coords(&self, rank: usize) -> Vec<c_int> {
        let mut left = rank;
        let mut out = vec![0; self.dims.len()];
        for (c, &d) in out.iter_mut().zip(&self.dims).rev() {
            *c = (left % d as usize) as c_int;
            left /= d as usize;
        }
        out
    }

    /// The rank at `coords`, a periodic dimension's taken modulo its
    /// extent; `None` past a non-periodic edge.
    fn rank(&self, coords: &[c_int]) -> Option<usize> {
        let mut r = 0usize;
        for ((&c, &d), &p) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let c = if p {
                c.rem_euclid(d)
            } else if (0..d).contains(&c) {
                c
            } else {
                return None;
            };
            r = r * d as usize + c as usize;
        }
        Some(r)
    }
}

/// A rank's neighbourhood in its communicator's topology, as the
/// neighbourhood collectives see it: its sources and its destinations in
/// MPI's order, `None` for `MPI_PROC_NULL` (past a non-periodic edge of a
/// grid), each with the lane that pairs a block sent with the receive it
/// is for.
pub(crate) struct Hood {
    pub sources: Vec<Option<(u32, u64)>>,
    pub destinations: Vec<Option<(u32, u64)>>,
    /// The lanes a collective takes: alike on every member.
    pub lanes: u64,
}

/// The neighbourhood of this rank in `c` (`MPI_ERR_TOPOLOGY` if `c` has
/// no topology).
pub(crate) fn neighbourhood(c: &Comm) -> Result<Hood> {
    let me = c.rank() as usize;
    let listed = |ranks: &mut dyn Iterator<Item = c_int>| -> Vec<Option<(u32, u64)>> {
        ranks.map(|r| Some((r as u32, 0))).collect()
    };
    match c.topo.get() {
        // Per dimension the neighbour below, then the one above. A block
        // sent up arrives as its receiver's block from below (lane 2d),
        // one sent down as the block from above (lane 2d + 1): in a
        // periodic dimension of extent 1 or 2 both neighbours are one
        // rank, and the lanes keep its two blocks apart.
        Some(Topo::Cart(cart)) => {
            let mine = cart.coords(me);
            let at = |d: usize, by: c_int| {
                let mut x = mine.clone();
                x[d] += by;
                cart.rank(&x).map(|r| r as u32)
            };
            let mut hood = Hood {
                sources: Vec::new(),
                destinations: Vec::new(),
                lanes: 2 * cart.dims.len() as u64,
            };
            for d in 0..cart.dims.len() {
                let (below, above, lane) = (at(d, -1), at(d, 1), 2 * d as u64);
                hood.sources.push(below.map(|r| (r, lane)));
                hood.sources.push(above.map(|r| (r, lane + 1)));
                hood.destinations.push(below.map(|r| (r, lane + 1)));
                hood.destinations.push(above.map(|r| (r, lane)));
            }
            Ok(hood)
        }
        // A graph's edges go both ways; one lane, first sent first taken,
        // pairs the blocks of an edge listed more than once.
        Some(Topo::Graph(g)) => {
            let ranks = listed(&mut g.neighbours(me).iter().copied());
            Ok(Hood {
                sources: ranks.clone(),
                destinations: ranks,
                lanes: 1,
            })
        }
        Some(Topo::Dist(d)) => Ok(Hood {
            sources: listed(&mut d.sources.iter().map(|s| s.0)),
            destinations: listed(&mut d.destinations.iter().map(|s| s.0)),
            lanes: 1,
        }),
        None => Err(Fail::new(
            ERR_TOPOLOGY,
            "the communicator has no topology (a neighbourhood collective needs one)",
        )),
    }
}

/// The grid of communicator `h` (`MPI_ERR_TOPOLOGY` if it has none).
fn cart_of(h: Handle) -> Result<(std::sync::Arc<Comm>, Cart)> {
    let c = comm(h)?;
    match c.topo.get() {
        Some(Topo::Cart(cart)) => {
            let cart = cart.clone();
            Ok((c, cart))
        }
        _ => Err(Fail::new(
            ERR_TOPOLOGY,
            "the communicator has no Cartesian topology",
        )),
    }
}

/// `n` ints at `p` (none when `n` is 0).
///
/// # Safety
/// `p` holds `n` ints when `n` > 0.
unsafe fn ints<'a>(p: *const c_int, n: usize, what: &str) -> Result<&'a [c_int]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::arg(format!("{what} is NULL")));
    }
    // SAFETY: `n` ints (the contract).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The grid `ndims` dims and periods describe, checked: every extent
/// positive, their product within `c_int`.
///
/// # Safety
/// `dims` and `periods` hold `ndims` ints.
unsafe fn grid(ndims: c_int, dims: *const c_int, periods: *const c_int) -> Result<Cart> {
    let n = usize::try_from(ndims).map_err(|_| Fail::new(ERR_DIMS, format!("ndims is {ndims}")))?;
    // SAFETY: the contract.
    let (d, p) = unsafe { (ints(dims, n, "dims")?, ints(periods, n, "periods")?) };
    let mut total: i64 = 1;
    for &x in d {
        if x <= 0 {
            return Err(Fail::new(ERR_DIMS, format!("a dimension of {x}")));
        }
        total = total.saturating_mul(x.into());
    }
    if total > i64::from(c_int::MAX) {
        return Err(Fail::new(
            ERR_DIMS,
            "the grid holds more than 2^31 - 1 ranks",
        ));
    }
    Ok(Cart {
        dims: d.to_vec(),
        periods: p.iter().map(|&x| x != 0).collect(),
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_create(
    ch: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    out: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Cart_create", || {
        // SAFETY: the contract.
        let cart = unsafe { grid(ndims, dims, periods) }?;
        let c = comm(ch)?;
        let n = cart.size();
        if n > c.size() as usize {
            return Err(Fail::new(
                ERR_DIMS,
                format!("a grid of {n} ranks on a communicator of {}", c.size()),
            ));
        }
        with_topology(ch, n, Topo::Cart(cart), out)
    })
}

/// `*out` = a communicator of the first `n` ranks of `ch`, in order, with
/// topology `t`; the others get `MPI_COMM_NULL`.
fn with_topology(ch: Handle, n: usize, t: Topo, out: *mut Handle) -> Result<()> {
    let me = comm(ch)?.rank() as usize;
    let color = if me < n { 0 } else { UNDEFINED };
    split(ch, color, me as c_int, out, "")?;
    // SAFETY: written by `split` (the caller's contract).
    let h = unsafe { *out };
    if h != COMM_NULL {
        let _ = comm(h)?.topo.set(t);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Cartdim_get(ch: Handle, ndims: *mut c_int) -> c_int {
    entry(ch, "MPI_Cartdim_get", || {
        let (_, cart) = cart_of(ch)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(ndims, cart.dims.len() as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_get(
    ch: Handle,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Cart_get", || {
        let (c, cart) = cart_of(ch)?;
        let n = cart.dims.len();
        if usize::try_from(maxdims).map_or(true, |m| m < n) {
            return Err(Fail::arg(format!(
                "maxdims {maxdims}: the grid has {n} dimensions"
            )));
        }
        let mine = cart.coords(c.rank() as usize);
        let rows = cart.dims.iter().zip(&cart.periods).zip(&mine);
        for (i, ((&d, &p), &x)) in rows.enumerate() {
            // SAFETY: `maxdims` ints each, or NULL (the contract).
            unsafe {
                if !dims.is_null() {
                    *dims.add(i) = d;
                }
                if !periods.is_null() {
                    *periods.add(i) = c_int::from(p);
                }
                if !coords.is_null() {
                    *coords.add(i) = x;
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_rank(
    ch: Handle,
    coords: *const c_int,
    rank: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Cart_rank", || {
        let (_, cart) = cart_of(ch)?;
        // SAFETY: `ndims` ints (the contract).
        let at = unsafe { ints(coords, cart.dims.len(), "coords") }?;
        let r = cart.rank(at).ok_or_else(|| {
            Fail::new(
                ERR_RANK,
                format!("coordinates {at:?} lie outside the grid {:?}", cart.dims),
            )
        })?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(rank, r as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_coords(
    ch: Handle,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Cart_coords", || {
        let (_, cart) = cart_of(ch)?;
        let n = cart.dims.len();
        let r = usize::try_from(rank)
            .ok()
            .filter(|&r| r < cart.size())
            .ok_or_else(|| Fail::new(ERR_RANK, format!("rank {rank} is not in the grid")))?;
        if usize::try_from(maxdims).map_or(true, |m| m < n) {
            return Err(Fail::arg(format!(
                "maxdims {maxdims}: the grid has {n} dimensions"
            )));
        }
        if n > 0 && coords.is_null() {
            return Err(Fail::arg("coords is NULL"));
        }
        for (i, c) in cart.coords(r).into_iter().enumerate() {
            // SAFETY: `maxdims` ints (the contract).
            unsafe { *coords.add(i) = c };
        }
        Ok(())
    })
}

/// `MPI_Cart_shift(comm, direction, disp, source, dest)`: the ranks
/// `disp` before and after this one along `direction`; `MPI_PROC_NULL`
/// past a non-periodic edge.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_shift(
    ch: Handle,
    direction: c_int,
    disp: c_int,
    source: *mut c_int,
    dest: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Cart_shift", || {
        let (c, cart) = cart_of(ch)?;
        let d = usize::try_from(direction)
            .ok()
            .filter(|&d| d < cart.dims.len())
            .ok_or_else(|| {
                Fail::arg(format!(
                    "direction {direction}: the grid has {} dimensions",
                    cart.dims.len()
                ))
            })?;
        let mine = cart.coords(c.rank() as usize);
        let at = |by: c_int| {
            let mut x = mine.clone();
            x[d] = x[d].saturating_add(by);
            cart.rank(&x).map_or(PROC_NULL, |r| r as c_int)
        };
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(source, at(disp.saturating_neg()));
            put(dest, at(disp));
        }
        Ok(())
    })
}

/// `MPI_Cart_sub(comm, remain_dims, newcomm)`: the sub-grids along the
/// dimensions kept, one communicator per value of the others.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_sub(ch: Handle, remain: *const c_int, out: *mut Handle) -> c_int {
    entry(ch, "MPI_Cart_sub", || {
        let (c, cart) = cart_of(ch)?;
        // SAFETY: `ndims` ints (the contract).
        let keep: Vec<bool> = unsafe { ints(remain, cart.dims.len(), "remain_dims") }?
            .iter()
            .map(|&k| k != 0)
            .collect();
        let mine = cart.coords(c.rank() as usize);
        // The colour: this rank's place in the grid of the dropped
        // dimensions; the key: its place in the kept one.
        let (mut color, mut key) = (0i64, 0i64);
        for ((&x, &d), &k) in mine.iter().zip(&cart.dims).zip(&keep) {
            if k {
                key = key * i64::from(d) + i64::from(x);
            } else {
                color = color * i64::from(d) + i64::from(x);
            }
        }
        split(ch, color as c_int, key as c_int, out, "")?;
        let sub = Cart {
            dims: zip_kept(&cart.dims, &keep),
            periods: zip_kept(&cart.periods, &keep),
        };
        // SAFETY: written by `split` (the contract).
        let _ = comm(unsafe { *out })?.topo.set(Topo::Cart(sub));
        Ok(())
    })
}

/// The entries of `v` whose `keep` is set.
fn zip_kept<T: Copy>(v: &[T], keep: &[bool]) -> Vec<T> {
    v.iter()
        .zip(keep)
        .filter(|(_, &k)| k)
        .map(|(&x, _)| x)
        .collect()
}

/// `MPI_Cart_map`: the rank this process would have in such a grid (its
/// own, as `MPI_Cart_create` keeps the order), `MPI_UNDEFINED` beyond it.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cart_map(
    ch: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Cart_map", || {
        // SAFETY: the contract.
        let cart = unsafe { grid(ndims, dims, periods) }?;
        let c = comm(ch)?;
        if cart.size() > c.size() as usize {
            return Err(Fail::new(
                ERR_DIMS,
                "the grid holds more ranks than the communicator",
            ));
        }
        let me = c.rank() as usize;
        let r = if me < cart.size() {
            me as c_int
        } else {
            UNDEFINED
        };
        // SAFETY: NULL or valid (the contract).
        unsafe { put(newrank, r) };
        Ok(())
    })
}

/// `MPI_CART`, `MPI_GRAPH` or `MPI_DIST_GRAPH` for a communicator with
/// a topology, else `MPI_UNDEFINED`.
pub(crate) fn topology_of(h: Handle) -> Result<c_int> {
    Ok(match comm(h)?.topo.get() {
        Some(Topo::Cart(_)) => CART,
        Some(Topo::Graph(_)) => GRAPH,
        Some(Topo::Dist(_)) => DIST_GRAPH,
        None => UNDEFINED,
    })
}

/// A duplicate's topology: the original's (`MPI_Comm_dup` keeps it).
pub(crate) fn copy_topology(from: Handle, to: Handle) -> Result<()> {
    if let Some(t) = comm(from)?.topo.get().cloned() {
        let _ = comm(to)?.topo.set(t);
    }
    Ok(())
}

// ------------------------------------------------------------ graphs

/// The graph `nnodes`, `index` and `edges` describe, checked: `index`
/// non-decreasing from 0, every edge a node.
///
/// # Safety
/// `index` holds `nnodes` ints and `edges` `index[nnodes - 1]`.
unsafe fn graph(nnodes: c_int, index: *const c_int, edges: *const c_int) -> Result<Graph> {
    let n = usize::try_from(nnodes).map_err(|_| Fail::arg(format!("nnodes is {nnodes}")))?;
    // SAFETY: the contract.
    let index = unsafe { ints(index, n, "index") }?.to_vec();
    let mut last = 0;
    for &i in &index {
        if i < last {
            return Err(Fail::arg(format!(
                "index is not cumulative: {i} after {last}"
            )));
        }
        last = i;
    }
    // SAFETY: the contract.
    let edges = unsafe { ints(edges, last as usize, "edges") }?.to_vec();
    if let Some(&e) = edges.iter().find(|&&e| !(0..nnodes).contains(&e)) {
        return Err(Fail::new(
            ERR_TOPOLOGY,
            format!("edge to {e}, not a node of 0..{nnodes}"),
        ));
    }
    Ok(Graph { index, edges })
}

impl Graph {
    /// Node `r`'s neighbours.
    fn neighbours(&self, r: usize) -> &[c_int] {
        let from = if r == 0 {
            0
        } else {
            self.index[r - 1] as usize
        };
        &self.edges[from..self.index[r] as usize]
    }
}

/// The graph of communicator `h` (`MPI_ERR_TOPOLOGY` if it has none).
fn graph_of(h: Handle) -> Result<Graph> {
    match comm(h)?.topo.get() {
        Some(Topo::Graph(g)) => Ok(g.clone()),
        _ => Err(Fail::new(
            ERR_TOPOLOGY,
            "the communicator has no graph topology",
        )),
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_create(
    ch: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    out: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Graph_create", || {
        // SAFETY: the contract.
        let g = unsafe { graph(nnodes, index, edges) }?;
        let c = comm(ch)?;
        let n = g.index.len();
        if n > c.size() as usize {
            return Err(Fail::arg(format!(
                "a graph of {n} nodes on a communicator of {}",
                c.size()
            )));
        }
        with_topology(ch, n, Topo::Graph(g), out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Graphdims_get(
    ch: Handle,
    nnodes: *mut c_int,
    nedges: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Graphdims_get", || {
        let g = graph_of(ch)?;
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(nnodes, g.index.len() as c_int);
            put(nedges, g.edges.len() as c_int);
        }
        Ok(())
    })
}

/// `src` into `n` ints at `out` (`MPI_ERR_ARG` if there is less room).
///
/// # Safety
/// `out` holds `max` ints, or is NULL.
unsafe fn copy_out(src: &[c_int], out: *mut c_int, max: c_int, what: &str) -> Result<()> {
    if usize::try_from(max).map_or(true, |m| m < src.len()) {
        return Err(Fail::arg(format!(
            "{what}: room for {max}, {} to give",
            src.len()
        )));
    }
    if !src.is_empty() {
        if out.is_null() {
            return Err(Fail::arg(format!("{what} is NULL")));
        }
        // SAFETY: room for `max` ≥ `src.len()` ints (the contract).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), out, src.len()) };
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_get(
    ch: Handle,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Graph_get", || {
        let g = graph_of(ch)?;
        // SAFETY: the contract.
        unsafe {
            copy_out(&g.index, index, maxindex, "index")?;
            copy_out(&g.edges, edges, maxedges, "edges")
        }
    })
}

/// Node `rank` of graph `g`, checked.
fn node(g: &Graph, rank: c_int) -> Result<usize> {
    usize::try_from(rank)
        .ok()
        .filter(|&r| r < g.index.len())
        .ok_or_else(|| Fail::new(ERR_RANK, format!("rank {rank} is not a node of the graph")))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_neighbors_count(
    ch: Handle,
    rank: c_int,
    nneighbors: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Graph_neighbors_count", || {
        let g = graph_of(ch)?;
        let n = g.neighbours(node(&g, rank)?).len();
        // SAFETY: NULL or valid (the contract).
        unsafe { put(nneighbors, n as c_int) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_neighbors(
    ch: Handle,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Graph_neighbors", || {
        let g = graph_of(ch)?;
        let r = node(&g, rank)?;
        // SAFETY: the contract.
        unsafe { copy_out(g.neighbours(r), neighbors, maxneighbors, "neighbors") }
    })
}

/// `MPI_Graph_map`: this process's rank in such a graph (its own), or
/// `MPI_UNDEFINED` beyond it.
#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_map(
    ch: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Graph_map", || {
        // SAFETY: the contract.
        let g = unsafe { graph(nnodes, index, edges) }?;
        let me = comm(ch)?.rank() as usize;
        let r = if me < g.index.len() {
            me as c_int
        } else {
            UNDEFINED
        };
        // SAFETY: NULL or valid (the contract).
        unsafe { put(newrank, r) };
        Ok(())
    })
}

// ------------------------------------------------------------ distributed graphs

/// `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY`, the ABI's sentinels.
const UNWEIGHTED: usize = 10;
const WEIGHTS_EMPTY: usize = 11;

/// `n` (rank, weight) pairs from `ranks` and `weights` (weights 1 when
/// unweighted), every rank one of the communicator's `size`; whether
/// weights were given.
///
/// # Safety
/// `ranks` holds `n` ints, and so does `weights` unless a sentinel.
unsafe fn adjacent(
    n: c_int,
    ranks: *const c_int,
    weights: *const c_int,
    size: u32,
    what: &str,
) -> Result<(Vec<(c_int, c_int)>, bool)> {
    let n = usize::try_from(n).map_err(|_| Fail::arg(format!("{what} degree is {n}")))?;
    // SAFETY: the contract.
    let r = unsafe { ints(ranks, n, what) }?;
    if let Some(&x) = r
        .iter()
        .find(|&&x| u32::try_from(x).map_or(true, |x| x >= size))
    {
        return Err(Fail::new(
            ERR_RANK,
            format!("{what}: {x} is not a rank of 0..{size}"),
        ));
    }
    // MPI_WEIGHTS_EMPTY: weighted, with no edges to weigh.
    let (weighted, w) = match weights as usize {
        UNWEIGHTED => (false, vec![1; n]),
        WEIGHTS_EMPTY if n == 0 => (true, Vec::new()),
        WEIGHTS_EMPTY => {
            return Err(Fail::arg(format!(
                "{what}: MPI_WEIGHTS_EMPTY with {n} edges"
            )));
        }
        0 if n == 0 => (false, Vec::new()),
        // SAFETY: the contract.
        _ => (true, unsafe { ints(weights, n, "weights") }?.to_vec()),
    };
    Ok((r.iter().copied().zip(w).collect(), weighted))
}

/// A communicator like `ch`, every rank in it, with this rank's part of a
/// distributed graph.
fn dist_graph(ch: Handle, d: Dist, out: *mut Handle) -> Result<()> {
    let n = comm(ch)?.size() as usize;
    with_topology(ch, n, Topo::Dist(d), out)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_create_adjacent(
    ch: Handle,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    _info: Handle,
    _reorder: c_int,
    out: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Dist_graph_create_adjacent", || {
        let size = comm(ch)?.size();
        // SAFETY: the contract.
        let (sources, ws) = unsafe { adjacent(indegree, sources, sourceweights, size, "sources") }?;
        // SAFETY: the contract.
        let (destinations, wd) =
            unsafe { adjacent(outdegree, destinations, destweights, size, "destinations") }?;
        let weighted = ws || wd;
        dist_graph(
            ch,
            Dist {
                sources,
                destinations,
                weighted,
            },
            out,
        )
    })
}

/// `MPI_Dist_graph_create`: each rank names any edges (`n` sources, each
/// with its degree, destinations and weights); every edge goes to both
/// its ends through an all-gather, and each rank keeps its own, in the
/// order of the ranks that named them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_create(
    ch: Handle,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights: *const c_int,
    _info: Handle,
    _reorder: c_int,
    out: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Dist_graph_create", || {
        let c = comm(ch)?;
        let size = c.size();
        let count = usize::try_from(n).map_err(|_| Fail::arg(format!("n is {n}")))?;
        // SAFETY: `n` sources and degrees (the contract).
        let (srcs, degs) = unsafe {
            (
                ints(sources, count, "sources")?,
                ints(degrees, count, "degrees")?,
            )
        };
        if let Some(&d) = degs.iter().find(|&&d| d < 0) {
            return Err(Fail::arg(format!("a degree of {d}")));
        }
        let total = degs.iter().try_fold(0 as c_int, |t, &d| t.checked_add(d));
        let total = total.ok_or_else(|| Fail::arg("the degrees add up past 2^31 - 1"))?;
        // SAFETY: `Σ degrees` destinations (and weights) (the contract).
        let (dsts, weighted) =
            unsafe { adjacent(total, destinations, weights, size, "destinations") }?;
        let mut mine = Vec::with_capacity(total as usize * 3);
        let mut k = 0;
        for (&s, &d) in srcs.iter().zip(degs) {
            if u32::try_from(s).map_or(true, |s| s >= size) {
                return Err(Fail::new(
                    ERR_RANK,
                    format!("source {s} is not a rank of 0..{size}"),
                ));
            }
            for &(t, w) in &dsts[k..k + d as usize] {
                mine.extend([s, t, w]);
            }
            k += d as usize;
        }
        // Everyone's edge counts, then everyone's edges.
        let mut counts = vec![0u64; size as usize];
        c.group.all_gather(&[mine.len() as u64], &mut counts)?;
        let longest = counts.iter().copied().max().unwrap_or(0) as usize;
        let mut padded = mine;
        padded.resize(longest, 0);
        let mut all = vec![0 as c_int; longest * size as usize];
        c.group.all_gather(&padded, &mut all)?;
        let me = c.rank() as c_int;
        let (mut ins, mut outs) = (Vec::new(), Vec::new());
        for (r, &n) in counts.iter().enumerate() {
            for e in all[r * longest..r * longest + n as usize].chunks_exact(3) {
                if e[1] == me {
                    ins.push((e[0], e[2]));
                }
                if e[0] == me {
                    outs.push((e[1], e[2]));
                }
            }
        }
        // Weighted if any rank gave weights.
        let mut flags = vec![0u8; size as usize];
        c.group.all_gather(&[u8::from(weighted)], &mut flags)?;
        let weighted = flags.contains(&1);
        let d = Dist {
            sources: ins,
            destinations: outs,
            weighted,
        };
        dist_graph(ch, d, out)
    })
}

/// This rank's part of the distributed graph of `h`.
fn dist_of(h: Handle) -> Result<Dist> {
    match comm(h)?.topo.get() {
        Some(Topo::Dist(d)) => Ok(d.clone()),
        _ => Err(Fail::new(
            ERR_TOPOLOGY,
            "the communicator has no distributed graph topology",
        )),
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors_count(
    ch: Handle,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Dist_graph_neighbors_count", || {
        let d = dist_of(ch)?;
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(indegree, d.sources.len() as c_int);
            put(outdegree, d.destinations.len() as c_int);
            put(weighted, c_int::from(d.weighted));
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors(
    ch: Handle,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Dist_graph_neighbors", || {
        let d = dist_of(ch)?;
        for (pairs, ranks, weights, max, what) in [
            (&d.sources, sources, sourceweights, maxindegree, "sources"),
            (
                &d.destinations,
                destinations,
                destweights,
                maxoutdegree,
                "destinations",
            ),
        ] {
            let (r, w): (Vec<c_int>, Vec<c_int>) = pairs.iter().copied().unzip();
            // SAFETY: room for `max` ints each (the contract).
            unsafe { copy_out(&r, ranks, max, what) }?;
            if d.weighted && !matches!(weights as usize, 0 | UNWEIGHTED | WEIGHTS_EMPTY) {
                // SAFETY: as above.
                unsafe { copy_out(&w, weights, max, "weights") }?;
            }
        }
        Ok(())
    })
}
