//! Communicators, the rest: attributes and keyvals (with their copy and
//! delete callbacks, and the predefined `MPI_TAG_UB` … `MPI_UNIVERSE_SIZE`),
//! groups of a communicator's members, `MPI_Comm_split_type` (by host),
//! the `_with_info` and `i` forms of dup, info on communicators, memory
//! (`MPI_Alloc_mem`), and the answers for what meshwork has not (no
//! topology, no parent).

use crate::consts::*;
use crate::env::split;
use crate::p2p::{add_request, Request};
use crate::state::{comm, entry, mpi, Fail, Result};
use crate::{put, Handle, Status};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------ keyvals

type CopyFn = unsafe extern "C" fn(Handle, c_int, usize, usize, *mut usize, *mut c_int) -> c_int;
type DeleteFn = unsafe extern "C" fn(Handle, c_int, usize, usize) -> c_int;

/// `MPI_COMM_NULL_COPY_FN`, `MPI_COMM_DUP_FN`, `MPI_COMM_NULL_DELETE_FN`
/// in the ABI.
const NULL_COPY: usize = 0;
const DUP_COPY: usize = 1;
const NULL_DELETE: usize = 0;

#[derive(Clone, Copy)]
struct Keyval {
    copy: usize,
    delete: usize,
    extra: usize,
}

struct Keyvals {
    next: c_int,
    all: HashMap<c_int, Keyval>,
}

static KEYVALS: Mutex<Option<Keyvals>> = Mutex::new(None);

fn keyval(k: c_int) -> Result<Keyval> {
    lock(&KEYVALS)
        .as_ref()
        .and_then(|kv| kv.all.get(&k).copied())
        .ok_or_else(|| Fail::new(36, format!("keyval {k} is not one created here")))
}

/// The predefined attributes: (keyval, its value, stored where
/// `MPI_Comm_get_attr` can point).
fn predefined(k: c_int) -> Option<*const c_int> {
    static TAG_UB: c_int = crate::p2p::SYNC - 1;
    static HOST: c_int = PROC_NULL;
    static IO: c_int = ANY_SOURCE;
    static WTIME_IS_GLOBAL: c_int = 0;
    static UNIVERSE: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();
    Some(match k {
        501 => &TAG_UB,
        502 => &IO,
        503 => &HOST,
        504 => &WTIME_IS_GLOBAL,
        506 => crate::errcodes::LAST_USED.as_ptr(),
        507 => UNIVERSE.get_or_init(|| mpi().map_or(1, |m| m.world.size() as c_int)),
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create_keyval(
    copy: usize,
    delete: usize,
    out: *mut c_int,
    extra: usize,
) -> c_int {
    entry(COMM_WORLD, "MPI_Comm_create_keyval", || {
        let mut kv = lock(&KEYVALS);
        let kv = kv.get_or_insert_with(|| Keyvals {
            next: 1000,
            all: HashMap::new(),
        });
        let k = kv.next;
        kv.next += 1;
        kv.all.insert(
            k,
            Keyval {
                copy,
                delete,
                extra,
            },
        );
        // SAFETY: NULL or valid (the contract).
        unsafe { put(out, k) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Keyval_create(
    copy: usize,
    delete: usize,
    out: *mut c_int,
    extra: usize,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Comm_create_keyval(copy, delete, out, extra) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_free_keyval(k: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Comm_free_keyval", || {
        if k.is_null() {
            return Err(Fail::arg("keyval is NULL"));
        }
        // Attributes already set keep their keyval until deleted (MPI:
        // freeing marks it; here the entry goes once no communicator uses
        // it, which this table does not track, so it stays).
        // SAFETY: non-NULL, valid (the contract).
        unsafe { *k = 0 };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Keyval_free(k: *mut c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Comm_free_keyval(k) }
}

/// Call `k`'s delete callback on `value` of communicator `ch`.
fn call_delete(ch: Handle, k: c_int, value: usize) -> Result<()> {
    let kv = keyval(k)?;
    if kv.delete == NULL_DELETE {
        return Ok(());
    }
    // SAFETY: a function the program gave as MPI_Comm_delete_attr_function.
    let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(kv.delete) };
    // SAFETY: the callback's contract is the program's.
    let rc = unsafe { f(ch, k, value, kv.extra) };
    if rc != SUCCESS {
        return Err(Fail::new(
            rc,
            format!("the delete callback of keyval {k} returned {rc}"),
        ));
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_set_attr(ch: Handle, k: c_int, value: usize) -> c_int {
    entry(ch, "MPI_Comm_set_attr", || {
        let c = comm(ch)?;
        keyval(k)?;
        let old = {
            let mut a = lock(&c.attrs);
            let old = a
                .iter()
                .position(|(key, _)| *key == k)
                .map(|i| a.remove(i).1);
            a.push((k, value));
            old
        };
        if let Some(v) = old {
            call_delete(ch, k, v)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Attr_put(ch: Handle, k: c_int, value: usize) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Comm_set_attr(ch, k, value) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_attr(
    ch: Handle,
    k: c_int,
    out: *mut usize,
    flag: *mut c_int,
) -> c_int {
    entry(ch, "MPI_Comm_get_attr", || {
        let c = comm(ch)?;
        let found = match predefined(k) {
            Some(p) => Some(p as usize),
            None => lock(&c.attrs)
                .iter()
                .find(|(key, _)| *key == k)
                .map(|a| a.1),
        };
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(flag, c_int::from(found.is_some()));
            if let Some(v) = found {
                put(out, v);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Attr_get(
    ch: Handle,
    k: c_int,
    out: *mut usize,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Comm_get_attr(ch, k, out, flag) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_delete_attr(ch: Handle, k: c_int) -> c_int {
    entry(ch, "MPI_Comm_delete_attr", || {
        let c = comm(ch)?;
        let old = {
            let mut a = lock(&c.attrs);
            a.iter()
                .position(|(key, _)| *key == k)
                .map(|i| a.remove(i).1)
        };
        match old {
            Some(v) => call_delete(ch, k, v),
            None => Err(Fail::new(
                36,
                format!("no attribute of keyval {k} on this communicator"),
            )),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Attr_delete(ch: Handle, k: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Comm_delete_attr(ch, k) }
}

/// `MPI_Comm_dup`'s step for attributes: each keyval's copy callback
/// decides what `to` gets of `from`'s.
pub(crate) fn copy_attrs(from: Handle, to: Handle) -> Result<()> {
    let (src, dst) = (comm(from)?, comm(to)?);
    let attrs = lock(&src.attrs).clone();
    for (k, v) in attrs {
        let kv = keyval(k)?;
        let copied = match kv.copy {
            NULL_COPY => None,
            DUP_COPY => Some(v),
            f => {
                // SAFETY: a function the program gave as
                // MPI_Comm_copy_attr_function.
                let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(f) };
                let (mut out, mut flag) = (0usize, 0 as c_int);
                // SAFETY: the callback's contract is the program's.
                let rc = unsafe { f(from, k, kv.extra, v, &mut out, &mut flag) };
                if rc != SUCCESS {
                    return Err(Fail::new(
                        rc,
                        format!("the copy callback of keyval {k} returned {rc}"),
                    ));
                }
                (flag != 0).then_some(out)
            }
        };
        if let Some(v) = copied {
            lock(&dst.attrs).push((k, v));
        }
    }
    Ok(())
}

/// `MPI_Comm_free`'s step for attributes: every delete callback.
pub(crate) fn delete_attrs(h: Handle, c: &crate::state::Comm) {
    let attrs = std::mem::take(&mut *lock(&c.attrs));
    for (k, v) in attrs {
        let _ = call_delete(h, k, v);
    }
}

// ------------------------------------------------------------ groups

/// How two lists of world ranks compare: `same` (`MPI_IDENT` for groups,
/// `MPI_CONGRUENT` for two communicators) if equal in order,
/// `MPI_SIMILAR` if equal as sets, else `MPI_UNEQUAL`.
pub(crate) fn compare_members(a: &[u32], b: &[u32], same: c_int) -> c_int {
    if a == b {
        return same;
    }
    let (mut sa, mut sb) = (a.to_vec(), b.to_vec());
    sa.sort_unstable();
    sb.sort_unstable();
    if sa == sb {
        SIMILAR
    } else {
        UNEQUAL
    }
}

/// Groups: lists of world ranks.
static GROUPS: Mutex<Option<HashMap<Handle, Arc<Vec<u32>>>>> = Mutex::new(None);
const GROUP_NULL: Handle = 0x108;
const GROUP_EMPTY: Handle = 0x109;

fn group(h: Handle) -> Result<Arc<Vec<u32>>> {
    if h == GROUP_EMPTY {
        return Ok(Arc::new(Vec::new()));
    }
    lock(&GROUPS)
        .as_ref()
        .and_then(|g| g.get(&h).cloned())
        .ok_or_else(|| Fail::new(ERR_GROUP, format!("{h:#x} is not a group")))
}

fn add_group(members: Vec<u32>) -> Handle {
    let h = crate::state::new_handle();
    lock(&GROUPS)
        .get_or_insert_with(HashMap::new)
        .insert(h, Arc::new(members));
    h
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_group(ch: Handle, out: *mut Handle) -> c_int {
    entry(ch, "MPI_Comm_group", || {
        let members = comm(ch)?.members.clone();
        // SAFETY: NULL or valid (the contract).
        unsafe { put(out, add_group(members)) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_size(g: Handle, size: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Group_size", || {
        let n = group(g)?.len() as c_int;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(size, n) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_rank(g: Handle, rank: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Group_rank", || {
        let me = mpi()?.world.rank();
        let r = group(g)?
            .iter()
            .position(|&m| m == me)
            .map_or(UNDEFINED, |i| i as c_int);
        // SAFETY: NULL or valid (the contract).
        unsafe { put(rank, r) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_free(g: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Group_free", || {
        if g.is_null() {
            return Err(Fail::arg("group is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let h = unsafe { *g };
        if h != GROUP_EMPTY {
            lock(&GROUPS)
                .as_mut()
                .and_then(|m| m.remove(&h))
                .ok_or_else(|| Fail::new(ERR_GROUP, format!("{h:#x} is not a group")))?;
        }
        // SAFETY: as above.
        unsafe { *g = GROUP_NULL };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_translate_ranks(
    a: Handle,
    n: c_int,
    ranks: *const c_int,
    b: Handle,
    out: *mut c_int,
) -> c_int {
    entry(COMM_WORLD, "MPI_Group_translate_ranks", || {
        let (ga, gb) = (group(a)?, group(b)?);
        let n = usize::try_from(n).map_err(|_| Fail::new(ERR_COUNT, "n is negative"))?;
        if n > 0 && (ranks.is_null() || out.is_null()) {
            return Err(Fail::arg("ranks1 or ranks2 is NULL"));
        }
        for i in 0..n {
            // SAFETY: `n` entries each (the contract).
            let r = unsafe { *ranks.add(i) };
            let t = if r == PROC_NULL {
                PROC_NULL
            } else {
                let w = usize::try_from(r)
                    .ok()
                    .and_then(|r| ga.get(r))
                    .ok_or_else(|| {
                        Fail::new(ERR_RANK, format!("rank {r} is not in the first group"))
                    })?;
                gb.iter()
                    .position(|m| m == w)
                    .map_or(UNDEFINED, |j| j as c_int)
            };
            // SAFETY: as above.
            unsafe { *out.add(i) = t };
        }
        Ok(())
    })
}

/// A group of `members` (world ranks): `MPI_GROUP_EMPTY` when there are
/// none, as the standard has every constructor answer.
fn new_group(members: Vec<u32>) -> Handle {
    if members.is_empty() {
        GROUP_EMPTY
    } else {
        add_group(members)
    }
}

/// Rank `r` of a group whose ranks `seen` marks, marked: in range and
/// not named before (else `MPI_ERR_RANK`).
fn pick(r: c_int, seen: &mut [bool]) -> Result<usize> {
    let n = seen.len();
    let i = usize::try_from(r)
        .ok()
        .filter(|&i| i < n)
        .ok_or_else(|| Fail::new(ERR_RANK, format!("rank {r} is not in the group (0..{n})")))?;
    if std::mem::replace(&mut seen[i], true) {
        return Err(Fail::new(ERR_RANK, format!("rank {r} is named twice")));
    }
    Ok(i)
}

/// The ranks of a group of `len` that `MPI_Group_incl`/`_excl` name:
/// `n` of them at `ranks`, in their order, and which ranks they are
/// (more than `len` cannot all be distinct: the list stops at the first
/// repeat).
///
/// # Safety
/// `ranks` holds `n` ints (the contract).
unsafe fn listed(n: c_int, ranks: *const c_int, len: usize) -> Result<(Vec<usize>, Vec<bool>)> {
    let n = usize::try_from(n).map_err(|_| Fail::arg("n is negative"))?;
    if n > 0 && ranks.is_null() {
        return Err(Fail::arg("ranks is NULL"));
    }
    let mut seen = vec![false; len];
    // SAFETY: `n` ints (the contract).
    let named = (0..n)
        .map(|i| pick(unsafe { *ranks.add(i) }, &mut seen))
        .collect::<Result<_>>()?;
    Ok((named, seen))
}

/// The ranks of a group of `len` that `MPI_Group_range_incl`/`_excl`
/// name: `n` triplets (first, last, stride) at `ranges`, each run from
/// `first` towards `last` by `stride`, in order, and which ranks they
/// are. A stride of 0, or one pointing away from `last`, is
/// `MPI_ERR_ARG`; a rank out of range or named twice, `MPI_ERR_RANK`
/// (so the list never grows past the group).
///
/// # Safety
/// `ranges` holds `n` triplets (the contract).
unsafe fn ranged(
    n: c_int,
    ranges: *const [c_int; 3],
    len: usize,
) -> Result<(Vec<usize>, Vec<bool>)> {
    let n = usize::try_from(n).map_err(|_| Fail::arg("n is negative"))?;
    if n > 0 && ranges.is_null() {
        return Err(Fail::arg("ranges is NULL"));
    }
    let mut seen = vec![false; len];
    let mut named = Vec::new();
    for i in 0..n {
        // SAFETY: `n` triplets (the contract).
        let [first, last, stride] = unsafe { *ranges.add(i) };
        if stride == 0 || (stride > 0 && first > last) || (stride < 0 && first < last) {
            return Err(Fail::arg(format!(
                "range {i} ({first}, {last}, {stride}) does not run from its first rank to its last"
            )));
        }
        let mut r = first;
        loop {
            named.push(pick(r, &mut seen)?);
            match r.checked_add(stride) {
                Some(next) if (stride > 0 && next <= last) || (stride < 0 && next >= last) => {
                    r = next;
                }
                _ => break,
            }
        }
    }
    Ok((named, seen))
}

/// `*out` = a new group made from group `g`'s members by `make` (the
/// members, and the new group's in order).
///
/// # Safety
/// `out` is NULL or valid (the contract).
unsafe fn derive(
    name: &str,
    g: Handle,
    out: *mut Handle,
    make: impl FnOnce(&[u32]) -> Result<Vec<u32>>,
) -> c_int {
    entry(COMM_WORLD, name, || {
        if out.is_null() {
            return Err(Fail::arg("newgroup is NULL"));
        }
        let members = make(&group(g)?)?;
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(out, new_group(members)) };
        Ok(())
    })
}

/// `MPI_Group_union`, `_intersection` and `_difference`: `a`'s members in
/// `a`'s order, each kept or not by whether `b` has it (union: all of
/// `a`, then `b`'s others in `b`'s order).
///
/// # Safety
/// `out` is NULL or valid (the contract).
unsafe fn combine(name: &str, a: Handle, b: Handle, out: *mut Handle, keep: Option<bool>) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        derive(name, a, out, |ga| {
            let gb = group(b)?;
            let in_b: std::collections::HashSet<u32> = gb.iter().copied().collect();
            let mut members: Vec<u32> = match keep {
                Some(k) => ga
                    .iter()
                    .copied()
                    .filter(|m| in_b.contains(m) == k)
                    .collect(),
                None => ga.to_vec(),
            };
            if keep.is_none() {
                let in_a: std::collections::HashSet<u32> = ga.iter().copied().collect();
                members.extend(gb.iter().filter(|m| !in_a.contains(m)));
            }
            Ok(members)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_union(a: Handle, b: Handle, out: *mut Handle) -> c_int {
    // SAFETY: the same contract.
    unsafe { combine("MPI_Group_union", a, b, out, None) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_intersection(a: Handle, b: Handle, out: *mut Handle) -> c_int {
    // SAFETY: the same contract.
    unsafe { combine("MPI_Group_intersection", a, b, out, Some(true)) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_difference(a: Handle, b: Handle, out: *mut Handle) -> c_int {
    // SAFETY: the same contract.
    unsafe { combine("MPI_Group_difference", a, b, out, Some(false)) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_incl(
    g: Handle,
    n: c_int,
    ranks: *const c_int,
    out: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        derive("MPI_Group_incl", g, out, |m| {
            let (named, _) = listed(n, ranks, m.len())?;
            Ok(named.into_iter().map(|i| m[i]).collect())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_excl(
    g: Handle,
    n: c_int,
    ranks: *const c_int,
    out: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        derive("MPI_Group_excl", g, out, |m| {
            let (_, gone) = listed(n, ranks, m.len())?;
            Ok(kept(m, &gone))
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_range_incl(
    g: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    out: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        derive("MPI_Group_range_incl", g, out, |m| {
            let (named, _) = ranged(n, ranges, m.len())?;
            Ok(named.into_iter().map(|i| m[i]).collect())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_range_excl(
    g: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    out: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe {
        derive("MPI_Group_range_excl", g, out, |m| {
            let (_, gone) = ranged(n, ranges, m.len())?;
            Ok(kept(m, &gone))
        })
    }
}

/// The members of `m` that `gone` does not mark, in order.
fn kept(m: &[u32], gone: &[bool]) -> Vec<u32> {
    m.iter()
        .zip(gone)
        .filter(|(_, &g)| !g)
        .map(|(&w, _)| w)
        .collect()
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Group_compare(a: Handle, b: Handle, result: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Group_compare", || {
        let (ga, gb) = (group(a)?, group(b)?);
        let r = compare_members(&ga, &gb, IDENT);
        // SAFETY: NULL or valid (the contract).
        unsafe { put(result, r) };
        Ok(())
    })
}

// ------------------------------------------------------------ more comms

/// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` and
/// `MPI_COMM_TYPE_HW_UNGUIDED` split by host — the members whose host
/// name is this rank's — and so do the guided kinds when the info asks
/// for `mpi_shared_memory`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_split_type(
    ch: Handle,
    kind: c_int,
    key: c_int,
    info: Handle,
    out: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Comm_split_type", || {
        let c = comm(ch)?;
        let name = crate::env::host_name().unwrap_or_default();
        // The host's id: a hash of its name, gathered; a colour is the
        // lowest rank of the same host.
        let id = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut ids = vec![0u64; c.size() as usize];
        c.group.all_gather(&[id], &mut ids)?;
        let by_host = match kind {
            UNDEFINED => false,
            COMM_TYPE_SHARED => true,
            // Each part a strict subset of the communicator, naming its
            // resource in the info: a host, when the members span
            // several; on one host, no part (MPI_COMM_NULL).
            COMM_TYPE_HW_UNGUIDED => {
                let several = ids.iter().any(|&x| x != id);
                if several && info != INFO_NULL {
                    crate::env::info_put(info, "mpi_hw_resource_type", "mpi_shared_memory")?;
                }
                several
            }
            // The guided kinds split by the resource the info key
            // `mpi_hw_resource_type` names; the one resource meshwork
            // knows is the standard's, a host's shared memory. Any
            // other, or none, gives MPI_COMM_NULL.
            COMM_TYPE_HW_GUIDED | COMM_TYPE_RESOURCE_GUIDED => {
                crate::env::info_value(info, "mpi_hw_resource_type")?.as_deref()
                    == Some("mpi_shared_memory")
            }
            other => return Err(Fail::arg(format!("split_type {other} is not one of MPI's"))),
        };
        let color = if by_host {
            ids.iter().position(|&x| x == id).unwrap_or(0) as c_int
        } else {
            UNDEFINED
        };
        split(ch, color, key, out, "")
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_dup_with_info(
    ch: Handle,
    _info: Handle,
    out: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { crate::env::MPI_Comm_dup(ch, out) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_idup(
    ch: Handle,
    out: *mut Handle,
    request: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Comm_idup", || {
        if request.is_null() {
            return Err(Fail::arg("request is NULL"));
        }
        // The dup is made now (a collective every member makes in the same
        // order); the request is complete.
        // SAFETY: the same contract.
        let rc = unsafe { crate::env::MPI_Comm_dup(ch, out) };
        if rc != SUCCESS {
            return Err(Fail::new(rc, "the dup failed"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let h = add_request(Request::Done(Status::default()))?;
        // SAFETY: as above.
        unsafe { put(request, h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_idup_with_info(
    ch: Handle,
    _info: Handle,
    out: *mut Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { MPI_Comm_idup(ch, out, request) }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_set_info(ch: Handle, _info: Handle) -> c_int {
    // meshwork takes no hints from info.
    entry(ch, "MPI_Comm_set_info", || comm(ch).map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_info(ch: Handle, out: *mut Handle) -> c_int {
    entry(ch, "MPI_Comm_get_info", || {
        comm(ch)?;
        // SAFETY: the same contract: a new, empty info.
        let rc = unsafe { crate::env::MPI_Info_create(out) };
        if rc == SUCCESS {
            Ok(())
        } else {
            Err(Fail::new(rc, "no info object"))
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Topo_test(ch: Handle, status: *mut c_int) -> c_int {
    entry(ch, "MPI_Topo_test", || {
        let kind = crate::topo::topology_of(ch)?;
        // SAFETY: NULL or valid (the contract).
        unsafe { put(status, kind) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_parent(parent: *mut Handle) -> c_int {
    // No process is spawned by another here.
    // SAFETY: NULL or valid (the contract).
    unsafe { put(parent, COMM_NULL) };
    SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Alloc_mem(
    size: isize,
    _info: Handle,
    base: *mut *mut c_void,
) -> c_int {
    entry(COMM_WORLD, "MPI_Alloc_mem", || {
        let n = usize::try_from(size).map_err(|_| Fail::arg(format!("size {size} is negative")))?;
        // SAFETY: malloc of at least one byte.
        let p = unsafe { libc::malloc(n.max(1)) };
        if p.is_null() {
            return Err(Fail::new(39, format!("no memory for {n} bytes")));
        }
        // SAFETY: NULL or valid (the contract).
        unsafe { put(base, p) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Free_mem(base: *mut c_void) -> c_int {
    // SAFETY: memory from MPI_Alloc_mem (the contract), or NULL.
    unsafe { libc::free(base) };
    SUCCESS
}

/// The ranks in `c` of `g`'s members (world ranks), in `g`'s order.
fn ranks_in(c: &crate::state::Comm, g: &[u32]) -> Result<Vec<u32>> {
    g.iter()
        .map(|w| {
            c.members
                .iter()
                .position(|m| m == w)
                .map(|i| i as u32)
                .ok_or_else(|| {
                    Fail::new(
                        9,
                        format!("world rank {w} of the group is not in the communicator"),
                    )
                })
        })
        .collect()
}

/// Register a group made over `group`'s members as a communicator.
fn add_made(
    parent: &crate::state::Comm,
    group: Arc<mw::ProcessGroup>,
    members: Vec<u32>,
) -> Handle {
    let handler = parent.errhandler.load(std::sync::atomic::Ordering::Relaxed);
    mpi().map_or(COMM_NULL, |m| {
        m.add_comm(crate::state::Comm::new(group, "", handler, members))
    })
}

/// Groups made by `MPI_Comm_create_group`, by (parent, members, tag).
type Made = (usize, Vec<u32>, c_int);

/// `MPI_Comm_create_group`: a collective of `g`'s members only, each
/// giving the same `tag`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create_group(
    ch: Handle,
    g: Handle,
    tag: c_int,
    out: *mut Handle,
) -> c_int {
    entry(ch, "MPI_Comm_create_group", || {
        let c = comm(ch)?;
        let members = group(g)?;
        let ranks = ranks_in(&c, &members)?;
        let me = mpi()?.world.rank();
        let h = if members.contains(&me) {
            // meshwork's key names the group among those made from this
            // communicator: the members, the tag, and how many such were
            // made before (the members call in the same order).
            let made = {
                static MADE: Mutex<Option<HashMap<Made, u64>>> = Mutex::new(None);
                let mut m = lock(&MADE);
                let n = m
                    .get_or_insert_with(HashMap::new)
                    .entry((Arc::as_ptr(&c) as usize, ranks.clone(), tag))
                    .or_insert(0);
                *n += 1;
                *n
            };
            let key = ranks
                .iter()
                .chain([&(tag as u32), &(made as u32), &((made >> 32) as u32)])
                .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
                    (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
                });
            let sub = c.group.subgroup(&ranks, key)?;
            add_made(&c, sub, (*members).clone())
        } else {
            COMM_NULL
        };
        // SAFETY: NULL or valid (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// `MPI_Comm_create`: a collective of all of `ch`; those outside `g` get
/// `MPI_COMM_NULL`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create(ch: Handle, g: Handle, out: *mut Handle) -> c_int {
    entry(ch, "MPI_Comm_create", || {
        let members = group(g)?;
        let me = mpi()?.world.rank();
        let (color, key) = match members.iter().position(|&m| m == me) {
            Some(i) => (0, i as c_int),
            None => (UNDEFINED, 0),
        };
        split(ch, color, key, out, "")
    })
}

// ------------------------------------------------------------ topology helper

/// `MPI_Dims_create(nnodes, ndims, dims)`: the entries of `dims` that are
/// 0 are filled so that the product of all is `nnodes`, as close to each
/// other as they can be and in non-increasing order (the others are kept
/// as given). `MPI_ERR_DIMS` if `nnodes` is not a multiple of the kept
/// ones' product, or an entry is negative.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Dims_create", || {
        let n =
            usize::try_from(ndims).map_err(|_| Fail::new(ERR_DIMS, format!("ndims is {ndims}")))?;
        if nnodes < 1 {
            return Err(Fail::new(ERR_DIMS, format!("nnodes is {nnodes}")));
        }
        if n == 0 {
            return Ok(());
        }
        if dims.is_null() {
            return Err(Fail::arg("dims is NULL"));
        }
        // SAFETY: `ndims` entries (the contract).
        let dims = unsafe { std::slice::from_raw_parts_mut(dims, n) };
        let mut kept: i64 = 1;
        for &d in dims.iter() {
            if d < 0 {
                return Err(Fail::new(ERR_DIMS, format!("dims holds {d}")));
            }
            if d > 0 {
                kept = kept.saturating_mul(d.into());
            }
        }
        let free = dims.iter().filter(|&&d| d == 0).count();
        let nodes = i64::from(nnodes);
        if nodes % kept != 0 || (free == 0 && nodes != kept) {
            return Err(Fail::new(
                ERR_DIMS,
                format!(
                    "{nnodes} processes do not divide into the fixed dimensions (product {kept})"
                ),
            ));
        }
        // The prime factors of what is left, largest first, each onto the
        // smallest free dimension so far.
        let mut left = nodes / kept;
        let mut primes = Vec::new();
        let mut p = 2;
        while p * p <= left {
            while left % p == 0 {
                primes.push(p);
                left /= p;
            }
            p += 1;
        }
        if left > 1 {
            primes.push(left);
        }
        let mut made = vec![1i64; free];
        for &q in primes.iter().rev() {
            if let Some(m) = made.iter_mut().min() {
                *m *= q;
            }
        }
        made.sort_unstable_by(|a, b| b.cmp(a));
        for (d, m) in dims.iter_mut().filter(|d| **d == 0).zip(made) {
            *d = m as c_int;
        }
        Ok(())
    })
}
