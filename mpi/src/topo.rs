//! Cartesian topologies (MPI-5 §8.5): `MPI_Cart_create` makes a
//! communicator of the first `∏ dims` ranks that knows its grid, and the
//! stencil codes' helpers answer from it — coordinates, ranks, the
//! neighbours one shift away (`MPI_PROC_NULL` past a non-periodic edge)
//! and sub-grids. Ranks keep their order (row-major, the last dimension
//! fastest): meshwork's links are alike between any two ranks of a host,
//! and across hosts it has no map of the network to reorder by.

use crate::consts::*;
use crate::env::split;
use crate::state::{comm, entry, Comm, Fail, Result};
use crate::{put, Handle};
use std::ffi::c_int;

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

/// The grid of communicator `h` (`MPI_ERR_TOPOLOGY` if it has none).
fn cart_of(h: Handle) -> Result<(std::sync::Arc<Comm>, Cart)> {
    let c = comm(h)?;
    let cart = c
        .cart
        .get()
        .cloned()
        .ok_or_else(|| Fail::new(ERR_TOPOLOGY, "the communicator has no Cartesian topology"))?;
    Ok((c, cart))
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
        // The first `n` ranks, in order; the others get MPI_COMM_NULL.
        let me = c.rank() as usize;
        let color = if me < n { 0 } else { UNDEFINED };
        split(ch, color, me as c_int, out, "")?;
        // SAFETY: written by `split` (the contract).
        let h = unsafe { *out };
        if h != COMM_NULL {
            let _ = comm(h)?.cart.set(cart);
        }
        Ok(())
    })
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
        let _ = comm(unsafe { *out })?.cart.set(sub);
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

/// `MPI_CART` for a communicator with a grid, else `MPI_UNDEFINED`.
pub(crate) fn topology_of(h: Handle) -> Result<c_int> {
    Ok(if comm(h)?.cart.get().is_some() {
        CART
    } else {
        UNDEFINED
    })
}

/// A duplicate's grid: the original's (`MPI_Comm_dup` keeps it).
pub(crate) fn copy_cart(from: Handle, to: Handle) -> Result<()> {
    if let Some(cart) = comm(from)?.cart.get().cloned() {
        let _ = comm(to)?.cart.set(cart);
    }
    Ok(())
}
