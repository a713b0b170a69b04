//! The reductions meshwork's collectives do not have: bitwise (`MPI_BAND`,
//! `MPI_BOR`, `MPI_BXOR`), logical (`MPI_LAND`, `MPI_LOR`, `MPI_LXOR`),
//! `MPI_MINLOC`/`MPI_MAXLOC` on the predefined pair types, and the
//! program's own (`MPI_Op_create`). A collective with one of them gathers
//! every rank's contribution with meshwork's gather or all-gather (one
//! call of the call entry, `coll.rs`) and folds them here, in rank order:
//! `x0 op (x1 op (… op xn-1))`, as the standard orders a reduction, so an
//! operator that does not commute gets its operands as MPI promises.
//! Correct, not tuned: it moves every rank's data to every folding rank.

use crate::consts::*;
use crate::datatype::Type;
use crate::state::{entry, new_handle, Fail, Result};
use crate::{put, Handle};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

/// `MPI_User_function`: `inoutvec[i] = invec[i] op inoutvec[i]`.
type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);
/// `MPI_User_function_c`, its count an `MPI_Count`.
type UserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut Handle);

const BAND: Handle = 0x28;
const BOR: Handle = 0x29;
const BXOR: Handle = 0x2a;
const LAND: Handle = 0x30;
const LOR: Handle = 0x31;
const LXOR: Handle = 0x32;
const MINLOC: Handle = 0x38;
const MAXLOC: Handle = 0x39;
const REPLACE: Handle = 0x3c;
const NO_OP: Handle = 0x3d;

#[derive(Clone, Copy, Debug)]
enum Kernel {
    Bits(Bitwise),
    Logic(Bitwise),
    Loc { min: bool, pair: Pair },
    User(UserFn),
    UserC(UserFnC),
}

#[derive(Clone, Copy, Debug)]
enum Bitwise {
    And,
    Or,
    Xor,
}

impl Bitwise {
    fn apply(self, a: bool, b: bool) -> bool {
        match self {
            Bitwise::And => a & b,
            Bitwise::Or => a | b,
            Bitwise::Xor => a ^ b,
        }
    }

    fn bytes(self, a: u8, b: u8) -> u8 {
        match self {
            Bitwise::And => a & b,
            Bitwise::Or => a | b,
            Bitwise::Xor => a ^ b,
        }
    }
}

/// A predefined pair type of `MPI_MINLOC`/`MPI_MAXLOC`: its value's kind
/// and where its index lies (an `int`, except in the Fortran pairs).
#[derive(Clone, Copy, Debug)]
struct Pair {
    value: Value,
    index_at: usize,
    index: Value,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    F32,
    F64,
    I16,
    I32,
    I64,
}

impl Value {
    fn read(self, b: &[u8]) -> Num {
        fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
            let mut a = [0u8; N];
            a.copy_from_slice(&b[..N]);
            a
        }
        match self {
            Value::F32 => Num::F(f64::from(f32::from_ne_bytes(arr(b)))),
            Value::F64 => Num::F(f64::from_ne_bytes(arr(b))),
            Value::I16 => Num::I(i64::from(i16::from_ne_bytes(arr(b)))),
            Value::I32 => Num::I(i64::from(i32::from_ne_bytes(arr(b)))),
            Value::I64 => Num::I(i64::from_ne_bytes(arr(b))),
        }
    }

    fn size(self) -> usize {
        match self {
            Value::I16 => 2,
            Value::F32 | Value::I32 => 4,
            Value::F64 | Value::I64 => 8,
        }
    }
}

/// A value of a pair, compared as its kind compares.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Num {
    F(f64),
    I(i64),
}

fn pair_of(dt: Handle) -> Option<Pair> {
    let (value, index_at, index) = match dt {
        0x228 => (Value::F32, 4, Value::I32), // MPI_FLOAT_INT
        0x229 => (Value::F64, 8, Value::I32), // MPI_DOUBLE_INT
        0x22a => (Value::I64, 8, Value::I32), // MPI_LONG_INT (LP64)
        0x22b => (Value::I32, 4, Value::I32), // MPI_2INT
        0x22c => (Value::I16, 4, Value::I32), // MPI_SHORT_INT
        0x230 => (Value::F32, 4, Value::F32), // MPI_2REAL
        0x231 => (Value::F64, 8, Value::F64), // MPI_2DOUBLE_PRECISION
        0x232 => (Value::I32, 4, Value::I32), // MPI_2INTEGER
        _ => return None,
    };
    (dt != 0x22a || std::mem::size_of::<std::ffi::c_long>() == 8).then_some(Pair {
        value,
        index_at,
        index,
    })
}

/// The types the logical operators take besides the integers: C's and
/// C++'s `bool` and Fortran's `LOGICAL`s.
fn logical(ty: &Type) -> bool {
    ["MPI_C_BOOL", "MPI_CXX_BOOL", "MPI_LOGICAL"]
        .iter()
        .any(|n| ty.name.starts_with(n))
}

fn integer(ty: &Type) -> bool {
    use mw::DType::*;
    matches!(ty.dtype, Some(I8 | U8 | I16 | U16 | I32 | U32 | I64 | U64))
}

/// `element` (an integer or a logical of its width) set to 1 or 0, in
/// its own byte order.
fn set_truth(element: &mut [u8], truth: bool) {
    element.fill(0);
    let one = if cfg!(target_endian = "little") {
        0
    } else {
        element.len() - 1
    };
    element[one] = u8::from(truth);
}

/// A reduction done here on the packed contributions of the ranks.
#[derive(Clone, Debug)]
pub(crate) struct Fold {
    kernel: Kernel,
    ty: Arc<Type>,
    dt: Handle,
}

impl Fold {
    /// The fold of operator `op` on type `dt` (`ty`), or `None` if `op`
    /// is one meshwork's collectives reduce with (or `MPI_OP_NULL`, which
    /// the caller names). An operator meshwork lacks, or one that does
    /// not take `dt`, is `MPI_ERR_OP`.
    pub(crate) fn of(op: Handle, dt: Handle, ty: &Arc<Type>) -> Result<Option<Fold>> {
        let refuse = |what: &str| {
            Err(Fail::new(
                ERR_OP,
                format!(
                    "{what} does not take {} (MPI's table of operators and types)",
                    ty.name
                ),
            ))
        };
        let kernel = match op {
            0x20..=0x24 => return Ok(None),
            BAND | BOR | BXOR => {
                if !integer(ty) {
                    return refuse("a bitwise reduction");
                }
                Kernel::Bits([Bitwise::And, Bitwise::Or, Bitwise::Xor][op - BAND])
            }
            LAND | LOR | LXOR => {
                if !(integer(ty) || logical(ty)) {
                    return refuse("a logical reduction");
                }
                Kernel::Logic([Bitwise::And, Bitwise::Or, Bitwise::Xor][op - LAND])
            }
            MINLOC | MAXLOC => match pair_of(dt) {
                Some(pair) => Kernel::Loc {
                    min: op == MINLOC,
                    pair,
                },
                None => return refuse("MPI_MINLOC/MPI_MAXLOC (a predefined pair type)"),
            },
            other => match lock_ops().get(&other) {
                Some(user) => {
                    // The program's function reads the type's layout: a
                    // packed element must unpack into `extent` bytes.
                    if !ty.is_flat() && (ty.lb != 0 || ty.extent <= 0) {
                        return refuse("a reduction of the program's");
                    }
                    user.kernel
                }
                None => {
                    return Err(Fail::new(
                        ERR_OP,
                        format!("{other:#x} is not a reduction (MPI_REPLACE and MPI_NO_OP are for one-sided calls)"),
                    ))
                }
            },
        };
        Ok(Some(Fold {
            kernel,
            ty: ty.clone(),
            dt,
        }))
    }

    /// `acc = x op acc`, over `n` packed elements (`x` from the lower rank).
    pub(crate) fn combine(&self, x: &[u8], acc: &mut [u8], n: usize) {
        let size = self.ty.size;
        match self.kernel {
            Kernel::Bits(b) => {
                for (a, &x) in acc.iter_mut().zip(x) {
                    *a = b.bytes(x, *a);
                }
            }
            Kernel::Logic(b) => {
                for (a, x) in acc.chunks_exact_mut(size).zip(x.chunks_exact(size)) {
                    let truth = b.apply(x.iter().any(|&v| v != 0), a.iter().any(|&v| v != 0));
                    set_truth(a, truth);
                }
            }
            Kernel::Loc { min, pair } => {
                for (a, x) in acc.chunks_exact_mut(size).zip(x.chunks_exact(size)) {
                    let (u, v) = (pair.value.read(x), pair.value.read(a));
                    let at = pair.index_at..pair.index_at + pair.index.size();
                    let (i, j) = (
                        pair.index.read(&x[at.clone()]),
                        pair.index.read(&a[at.clone()]),
                    );
                    let x_wins = if u == v {
                        i < j
                    } else if min {
                        u < v
                    } else {
                        u > v
                    };
                    if x_wins {
                        a.copy_from_slice(x);
                    }
                }
            }
            Kernel::User(f) => {
                let mut len = c_int::try_from(n).unwrap_or(c_int::MAX);
                self.call_user(x, acc, n, |xs, accs, dt| {
                    // SAFETY: the program's function, given `len` elements
                    // of `dt` at each pointer, as MPI_Op_create's contract.
                    unsafe { f(xs, accs, &mut len, dt) }
                });
            }
            Kernel::UserC(f) => {
                let mut len = n as i64;
                self.call_user(x, acc, n, |xs, accs, dt| {
                    // SAFETY: as above.
                    unsafe { f(xs, accs, &mut len, dt) }
                });
            }
        }
    }

    /// Call the program's function on `x` and `acc` laid out as its type
    /// lays them out (unpacked into scratch when the type is not one run
    /// of bytes), `acc` packed back after.
    fn call_user(
        &self,
        x: &[u8],
        acc: &mut [u8],
        n: usize,
        f: impl FnOnce(*mut c_void, *mut c_void, *mut Handle),
    ) {
        let mut dt = self.dt;
        if self.ty.is_flat() {
            // A copy, 8-byte aligned as the function's element type may
            // need (a contribution in the gathered scratch need not be),
            // and its to change if it will.
            let mut xs = vec![0u64; x.len().div_ceil(8)];
            let xp = xs.as_mut_ptr().cast::<u8>();
            // SAFETY: `xs` holds at least `x.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(x.as_ptr(), xp, x.len()) };
            f(xp.cast(), acc.as_mut_ptr().cast(), &mut dt);
            return;
        }
        let span = n * self.ty.extent as usize;
        let (mut xl, mut al) = (vec![0u64; span.div_ceil(8)], vec![0u64; span.div_ceil(8)]);
        let (xp, ap) = (xl.as_mut_ptr().cast::<u8>(), al.as_mut_ptr().cast::<u8>());
        // SAFETY: `span` bytes hold `n` elements of a type with lower bound
        // 0 and this extent (checked in `Fold::of`).
        unsafe {
            self.ty.unpack(x, xp, n);
            self.ty.unpack(acc, ap, n);
        }
        f(xp.cast(), ap.cast(), &mut dt);
        // SAFETY: as above.
        if let Ok(packed) = unsafe { self.ty.pack(ap, n) } {
            acc.copy_from_slice(&packed);
        }
    }

    /// Into `out`: the fold of the contributions of `ranks` in `all`
    /// (`stride` bytes a rank), each read from `offset` for `n` elements.
    /// An empty range leaves `out` as it is.
    pub(crate) fn fold(
        &self,
        all: &[u8],
        stride: usize,
        offset: usize,
        ranks: std::ops::Range<usize>,
        n: usize,
        out: &mut [u8],
    ) {
        let len = n * self.ty.size;
        let part = |r: usize| &all[r * stride + offset..r * stride + offset + len];
        let Some(last) = ranks.clone().last() else {
            return;
        };
        out.copy_from_slice(part(last));
        if let Kernel::Logic(_) = self.kernel {
            // A logical result is 0 or 1, from one contribution too.
            for a in out.chunks_exact_mut(self.ty.size) {
                set_truth(a, a.iter().any(|&v| v != 0));
            }
        }
        for r in ranks.rev().skip(1) {
            self.combine(part(r), out, n);
        }
    }
}

/// An operator `MPI_Op_create` made.
struct UserOp {
    kernel: Kernel,
    commute: bool,
}

fn lock_ops() -> MutexGuard<'static, HashMap<Handle, UserOp>> {
    static OPS: LazyLock<Mutex<HashMap<Handle, UserOp>>> = LazyLock::new(Mutex::default);
    OPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `MPI_Op_create`'s body: an operator of the program's function
/// (`kernel`, `None` when the function is NULL).
fn create(name: &str, kernel: Option<Kernel>, commute: c_int, op: *mut Handle) -> c_int {
    entry(COMM_WORLD, name, || {
        let kernel = kernel.ok_or_else(|| Fail::arg("user_fn is NULL"))?;
        if op.is_null() {
            return Err(Fail::arg("op is NULL"));
        }
        let h = new_handle();
        lock_ops().insert(
            h,
            UserOp {
                kernel,
                commute: commute != 0,
            },
        );
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(op, h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Op_create(
    f: Option<UserFn>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    create("MPI_Op_create", f.map(Kernel::User), commute, op)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Op_create_c(
    f: Option<UserFnC>,
    commute: c_int,
    op: *mut Handle,
) -> c_int {
    create("MPI_Op_create_c", f.map(Kernel::UserC), commute, op)
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Op_free(op: *mut Handle) -> c_int {
    entry(COMM_WORLD, "MPI_Op_free", || {
        if op.is_null() {
            return Err(Fail::arg("op is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        let h = unsafe { *op };
        if lock_ops().remove(&h).is_none() {
            return Err(Fail::new(
                ERR_OP,
                format!("{h:#x} is not an operator MPI_Op_create made (a predefined one cannot be freed)"),
            ));
        }
        // SAFETY: as above.
        unsafe { put(op, 0x20) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn MPI_Op_commutative(op: Handle, commute: *mut c_int) -> c_int {
    entry(COMM_WORLD, "MPI_Op_commutative", || {
        let yes = match op {
            0x21..=0x24 | BAND | BOR | BXOR | LAND | LOR | LXOR | MINLOC | MAXLOC => true,
            // One-sided operators: the second operand replaces the first,
            // or is dropped.
            REPLACE => false,
            NO_OP => true,
            other => {
                lock_ops()
                    .get(&other)
                    .ok_or_else(|| Fail::new(ERR_OP, format!("{other:#x} is not an operator")))?
                    .commute
            }
        };
        if commute.is_null() {
            return Err(Fail::arg("commute is NULL"));
        }
        // SAFETY: non-NULL, valid (the contract).
        unsafe { put(commute, c_int::from(yes)) };
        Ok(())
    })
}
