//! Datatype decoding (MPI-5 §5.1.13): `MPI_Type_get_envelope` says how a
//! type was made, `MPI_Type_get_contents` gives back its constructor's
//! arguments and the types it was made from, as each constructor recorded
//! them ([`Recipe`]); `MPI_Type_get_value_index` names the predefined
//! (value, index) pair types. Libraries that copy or serialise a
//! program's types (mpi4py pickles them) read them this way.

use crate::consts::*;
use crate::datatype::{register, type_of, Arg, Recipe, Type};
use crate::state::{entry, Fail, Result};
use crate::{put, Handle};
use std::ffi::c_int;
use std::sync::Arc;

type Count = i64;

/// The recipe of type `h`: `None` for a predefined (named) type.
fn recipe(h: Handle) -> Result<Option<Arc<Recipe>>> {
    Ok(type_of(h)?.recipe.clone())
}

/// Where `MPI_Type_get_contents` puts an argument.
enum Slot {
    Int(c_int),
    Address(isize),
    Count(Count),
}

/// Argument `arg` of recipe `r` as `MPI_Type_get_contents` gives it: a
/// `_c` constructor's numbers and addresses are counts.
fn slot(r: &Recipe, arg: Arg) -> Slot {
    match arg {
        Arg::Int(v) => Slot::Int(v),
        Arg::Number(v) if r.large => Slot::Count(v),
        Arg::Address(v) if r.large => Slot::Count(v as Count),
        // An `int` constructor's numbers came as ints.
        Arg::Number(v) => Slot::Int(v as c_int),
        Arg::Address(v) => Slot::Address(v),
    }
}

/// How many ints, addresses and counts recipe `r` gives back.
fn tally(r: &Recipe) -> (usize, usize, usize) {
    r.args
        .iter()
        .fold((0, 0, 0), |(i, a, c), &arg| match slot(r, arg) {
            Slot::Int(_) => (i + 1, a, c),
            Slot::Address(_) => (i, a + 1, c),
            Slot::Count(_) => (i, a, c + 1),
        })
}

/// `MPI_Type_get_envelope(_c)`: the combiner and how many of each kind of
/// argument; (0, 0, 0, 0) and `MPI_COMBINER_NAMED` for a predefined type.
fn envelope(h: Handle) -> Result<(usize, usize, usize, usize, c_int)> {
    Ok(match recipe(h)? {
        None => (0, 0, 0, 0, COMBINER_NAMED),
        Some(r) => {
            let (i, a, c) = tally(&r);
            (i, a, c, r.types.len(), r.combiner)
        }
    })
}

/// A count that fits an `int` (the ABI's `int` outputs).
fn int(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_envelope(
    t: Handle,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    entry(COMM_WORLD, "MPI_Type_get_envelope", || {
        let (i, a, c, d, how) = envelope(t)?;
        if c > 0 {
            return Err(Fail::new(
                ERR_TYPE,
                "the type was made by a _c constructor: its arguments are counts (MPI_Type_get_envelope_c)",
            ));
        }
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(num_integers, int(i));
            put(num_addresses, int(a));
            put(num_datatypes, int(d));
            put(combiner, how);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_envelope_c(
    t: Handle,
    num_integers: *mut Count,
    num_addresses: *mut Count,
    num_large_counts: *mut Count,
    num_datatypes: *mut Count,
    combiner: *mut c_int,
) -> c_int {
    entry(COMM_WORLD, "MPI_Type_get_envelope_c", || {
        let (i, a, c, d, how) = envelope(t)?;
        // SAFETY: NULL or valid (the contract).
        unsafe {
            put(num_integers, i as Count);
            put(num_addresses, a as Count);
            put(num_large_counts, c as Count);
            put(num_datatypes, d as Count);
            put(combiner, how);
        }
        Ok(())
    })
}

/// Where `MPI_Type_get_contents(_c)` writes: each array with the room its
/// caller gave.
struct Outputs {
    ints: (*mut c_int, usize),
    addresses: (*mut isize, usize),
    counts: (*mut Count, usize),
    types: (*mut Handle, usize),
}

/// `MPI_Type_get_contents(_c)`: the arguments type `t` was made with
/// and the types it was made from. A predefined one among them (or a
/// Fortran kind's) comes back as its own handle; a derived one as a new
/// handle to the same type, which the caller frees (as MPI says), even if
/// the original was freed.
///
/// # Safety
/// Each output array holds at least the room its pair says.
unsafe fn contents(t: Handle, out: Outputs) -> Result<()> {
    let r = recipe(t)?.ok_or_else(|| {
        Fail::arg("a predefined type has no contents (its combiner is MPI_COMBINER_NAMED)")
    })?;
    let (i, a, c) = tally(&r);
    let d = r.types.len();
    if i > out.ints.1 || a > out.addresses.1 || c > out.counts.1 || d > out.types.1 {
        return Err(Fail::arg(format!(
            "room for {} ints, {} addresses, {} counts and {} types; the type has {i}, {a}, {c} and {d} (MPI_Type_get_envelope)",
            out.ints.1, out.addresses.1, out.counts.1, out.types.1
        )));
    }
    let (mut ni, mut na, mut nc) = (0, 0, 0);
    for &arg in &r.args {
        // SAFETY: within the room checked above (the contract).
        unsafe {
            match slot(&r, arg) {
                Slot::Int(v) => {
                    *out.ints.0.add(ni) = v;
                    ni += 1;
                }
                Slot::Address(v) => {
                    *out.addresses.0.add(na) = v;
                    na += 1;
                }
                Slot::Count(v) => {
                    *out.counts.0.add(nc) = v;
                    nc += 1;
                }
            }
        }
    }
    for (k, (h, ty)) in r.types.iter().enumerate() {
        let given = if ty.recipe.is_none() || is_kind(*h) {
            *h
        } else {
            register(Type::clone(ty))
        };
        // SAFETY: as above.
        unsafe { *out.types.0.add(k) = given };
    }
    Ok(())
}

/// The room an array argument gives: its length, none when NULL.
fn room<T>(p: *mut T, n: Count) -> (*mut T, usize) {
    let n = if p.is_null() {
        0
    } else {
        usize::try_from(n).unwrap_or(0)
    };
    (p, n)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_contents(
    t: Handle,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    integers: *mut c_int,
    addresses: *mut isize,
    datatypes: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Type_get_contents", || {
        let out = Outputs {
            ints: room(integers, max_integers.into()),
            addresses: room(addresses, max_addresses.into()),
            counts: (std::ptr::null_mut(), 0),
            types: room(datatypes, max_datatypes.into()),
        };
        // SAFETY: the arrays hold what the caller says (the contract).
        unsafe { contents(t, out) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_contents_c(
    t: Handle,
    max_integers: Count,
    max_addresses: Count,
    max_large_counts: Count,
    max_datatypes: Count,
    integers: *mut c_int,
    addresses: *mut isize,
    large_counts: *mut Count,
    datatypes: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Type_get_contents_c", || {
        let out = Outputs {
            ints: room(integers, max_integers),
            addresses: room(addresses, max_addresses),
            counts: room(large_counts, max_large_counts),
            types: room(datatypes, max_datatypes),
        };
        // SAFETY: the arrays hold what the caller says (the contract).
        unsafe { contents(t, out) }
    })
}

/// After a `_c` constructor made `*out` through its `int` form: the type
/// is marked as made with counts.
///
/// # Safety
/// `out` is NULL or valid.
pub(crate) unsafe fn counted(rc: c_int, out: *mut Handle) -> c_int {
    if rc == SUCCESS && !out.is_null() {
        // SAFETY: non-NULL, valid (the contract).
        crate::datatype::mark_large(unsafe { *out });
    }
    rc
}

/// The predefined pair type of values of type `value` with an index of
/// type `index`, as `MPI_MINLOC`/`MPI_MAXLOC` take: `MPI_DATATYPE_NULL`
/// where MPI has none.
fn pair_of(value: Handle, index: Handle) -> Handle {
    const FLOAT: Handle = 0x210;
    const DOUBLE: Handle = 0x214;
    const LONG: Handle = 0x20a;
    const INT: Handle = 0x209;
    const SHORT: Handle = 0x208;
    const LONG_DOUBLE: Handle = 0x220;
    const REAL: Handle = 0x21a;
    const DOUBLE_PRECISION: Handle = 0x21c;
    const INTEGER: Handle = 0x219;
    match (value, index) {
        (FLOAT, INT) => 0x228,
        (DOUBLE, INT) => 0x229,
        (LONG, INT) => 0x22a,
        (INT, INT) => 0x22b,
        (SHORT, INT) => 0x22c,
        (LONG_DOUBLE, INT) => 0x22d,
        (REAL, REAL) => 0x230,
        (DOUBLE_PRECISION, DOUBLE_PRECISION) => 0x231,
        (INTEGER, INTEGER) => 0x232,
        _ => DATATYPE_NULL,
    }
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_value_index(
    value: Handle,
    index: Handle,
    pair: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, "MPI_Type_get_value_index", || {
        type_of(value)?;
        type_of(index)?;
        if pair.is_null() {
            return Err(Fail::arg("type is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(pair, pair_of(value, index)) };
        Ok(())
    })
}

// ------------------------------------------------------------ Fortran kinds

/// The type of each Fortran kind asked for (`MPI_Type_create_f90_…`),
/// with the predefined type it is: one handle per (combiner, p, r), made once, so that asking again gives
/// the same type, which is never freed.
static KINDS: std::sync::Mutex<Vec<(Kind, Handle, Handle)>> = std::sync::Mutex::new(Vec::new());

/// A Fortran kind as asked for: (combiner, p, r).
type Kind = (c_int, c_int, c_int);

/// The predefined type whose precision and range cover `p` and `r`
/// (`MPI_UNDEFINED`: not asked for), from `(p, r, type)` rows, smallest
/// first.
fn covering(p: c_int, r: c_int, rows: &[(c_int, c_int, Handle)]) -> Option<Handle> {
    let fits = |want: c_int, have: c_int| want == UNDEFINED || (0..=have).contains(&want);
    rows.iter()
        .find(|&&(mp, mr, _)| fits(p, mp) && fits(r, mr))
        .map(|&(_, _, h)| h)
}

/// `*out` = the type of Fortran kind (`combiner`, `p`, `r`): the
/// predefined `base`, under a handle whose envelope says how it was
/// asked for.
fn kind(
    name: &str,
    combiner: c_int,
    (p, r): (c_int, c_int),
    base: Option<Handle>,
    out: *mut Handle,
) -> c_int {
    entry(COMM_WORLD, name, || {
        if out.is_null() {
            return Err(Fail::arg("newtype is NULL"));
        }
        let base = base
            .filter(|_| p != UNDEFINED || r != UNDEFINED)
            .ok_or_else(|| Fail::arg(format!("no Fortran kind has precision {p} and range {r}")))?;
        let mut kinds = KINDS.lock().unwrap_or_else(|e| e.into_inner());
        let h = match kinds.iter().find(|(k, ..)| *k == (combiner, p, r)) {
            Some(&(_, h, _)) => h,
            None => {
                let mut t = Type::clone(&*type_of(base)?);
                let args = if combiner == COMBINER_F90_INTEGER {
                    vec![Arg::Int(r)]
                } else {
                    vec![Arg::Int(p), Arg::Int(r)]
                };
                t.recipe = Some(Arc::new(Recipe {
                    combiner,
                    args,
                    types: Vec::new(),
                    large: false,
                }));
                let h = register(t);
                kinds.push(((combiner, p, r), h, base));
                h
            }
        };
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Whether `h` is the type of a Fortran kind (which, like a predefined
/// type, cannot be freed).
pub(crate) fn is_kind(h: Handle) -> bool {
    KINDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|&(_, k, _)| k == h)
}

/// The predefined type the Fortran kind `h` is, if `h` is one.
pub(crate) fn f90_base(h: Handle) -> Option<Handle> {
    KINDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|&&(_, k, _)| k == h)
        .map(|&(.., base)| base)
}

/// REAL*4, *8 and *16: IEEE single, double and quadruple precision.
const REALS: [(c_int, c_int, Handle); 3] = [(6, 37, 0x2d2), (15, 307, 0x2da), (33, 4931, 0x2e2)];
/// COMPLEX*8, *16 and *32, of the same parts.
const COMPLEXES: [(c_int, c_int, Handle); 3] =
    [(6, 37, 0x2db), (15, 307, 0x2e3), (33, 4931, 0x2eb)];
/// INTEGER*1 to *16, by decimal range.
const INTEGERS: [(c_int, c_int, Handle); 5] = [
    (0, 2, 0x2c1),
    (0, 4, 0x2c9),
    (0, 9, 0x2d1),
    (0, 18, 0x2d9),
    (0, 38, 0x2e1),
];

#[no_mangle]
pub extern "C" fn MPI_Type_create_f90_real(p: c_int, r: c_int, out: *mut Handle) -> c_int {
    let base = covering(p, r, &REALS);
    kind(
        "MPI_Type_create_f90_real",
        COMBINER_F90_REAL,
        (p, r),
        base,
        out,
    )
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_f90_complex(p: c_int, r: c_int, out: *mut Handle) -> c_int {
    let base = covering(p, r, &COMPLEXES);
    kind(
        "MPI_Type_create_f90_complex",
        COMBINER_F90_COMPLEX,
        (p, r),
        base,
        out,
    )
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_f90_integer(r: c_int, out: *mut Handle) -> c_int {
    let base = covering(UNDEFINED, r, &INTEGERS);
    kind(
        "MPI_Type_create_f90_integer",
        COMBINER_F90_INTEGER,
        (UNDEFINED, r),
        base,
        out,
    )
}
