//! Element types and their reduction kernels.
//!
//! Each kernel is a plain loop over two slices with the operator chosen once,
//! outside the loop, so the compiler emits one vectorised loop per
//! (type, operator) and nothing is dispatched per element. Half-precision
//! types widen to `f32`, combine, and round back once per step.

use crate::op::{DType, ReduceOp};
use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// A type the collectives can move and reduce.
///
/// Implemented for `f32, f64, half::f16, half::bf16, i8, i16, i32, i64, u8,
/// u16, u32, u64`, and sealed: the wire format names each one.
pub trait Element:
    bytemuck::Pod + Send + Sync + std::fmt::Debug + PartialEq + sealed::Sealed + 'static
{
    /// This type's tag, carried in every collective's descriptor.
    const DTYPE: DType;

    /// The value `x` such that `x ⊕ y = y` for `op`: 0 for Sum and Avg, 1 for
    /// Prod, +∞/−∞ for float Min/Max, `MAX`/`MIN` for integer Min/Max.
    fn identity(op: ReduceOp) -> Self;

    /// `acc[i] = acc[i] ⊕ x[i]`: `x` holds contributions of ranks after
    /// those already in `acc`. Slices have equal length.
    fn reduce(op: ReduceOp, acc: &mut [Self], x: &[Self]);

    /// `acc[i] = x[i] ⊕ acc[i]`: `x` holds contributions of ranks before
    /// those in `acc`. Keeping operand order fixed is what makes every rank's
    /// float result bitwise identical.
    fn reduce_from_left(op: ReduceOp, acc: &mut [Self], x: &[Self]);

    /// The last step of `Avg`: divide every element by `n`. Integers (which
    /// the facade never lets reach here) truncate.
    fn divide(acc: &mut [Self], n: usize);
}

#[inline(always)]
fn zip_with<T: Copy>(acc: &mut [T], x: &[T], f: impl Fn(T, T) -> T) {
    debug_assert_eq!(acc.len(), x.len());
    for (a, b) in acc.iter_mut().zip(x) {
        *a = f(*a, *b);
    }
}

macro_rules! native_float {
    ($t:ty, $dtype:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;

            fn identity(op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => 0.0,
                    ReduceOp::Prod => 1.0,
                    ReduceOp::Min => <$t>::INFINITY,
                    ReduceOp::Max => <$t>::NEG_INFINITY,
                }
            }

            fn reduce(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_with(acc, x, |a, b| a + b),
                    ReduceOp::Prod => zip_with(acc, x, |a, b| a * b),
                    ReduceOp::Min => zip_with(acc, x, |a, b| a.min(b)),
                    ReduceOp::Max => zip_with(acc, x, |a, b| a.max(b)),
                }
            }

            fn reduce_from_left(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_with(acc, x, |a, b| b + a),
                    ReduceOp::Prod => zip_with(acc, x, |a, b| b * a),
                    ReduceOp::Min => zip_with(acc, x, |a, b| b.min(a)),
                    ReduceOp::Max => zip_with(acc, x, |a, b| b.max(a)),
                }
            }

            fn divide(acc: &mut [Self], n: usize) {
                let n = n as $t;
                for a in acc {
                    *a /= n;
                }
            }
        }
    };
}

native_float!(f32, F32);
native_float!(f64, F64);

macro_rules! integer {
    ($t:ty, $dtype:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;

            fn identity(op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => 0,
                    ReduceOp::Prod => 1,
                    ReduceOp::Min => <$t>::MAX,
                    ReduceOp::Max => <$t>::MIN,
                }
            }

            // Integer operators are commutative bit for bit, so the operand
            // order needs no care.
            fn reduce(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_with(acc, x, <$t>::wrapping_add),
                    ReduceOp::Prod => zip_with(acc, x, <$t>::wrapping_mul),
                    ReduceOp::Min => zip_with(acc, x, Ord::min),
                    ReduceOp::Max => zip_with(acc, x, Ord::max),
                }
            }

            fn reduce_from_left(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                Self::reduce(op, acc, x)
            }

            fn divide(acc: &mut [Self], n: usize) {
                let n = <$t>::try_from(n).unwrap_or(<$t>::MAX);
                for a in acc {
                    *a /= n;
                }
            }
        }
    };
}

integer!(i8, I8);
integer!(i32, I32);
integer!(i64, I64);
integer!(u8, U8);
integer!(u32, U32);
integer!(u64, U64);
integer!(i16, I16);
integer!(u16, U16);

macro_rules! half_float {
    ($t:ty, $dtype:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;

            fn identity(op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => <$t>::ZERO,
                    ReduceOp::Prod => <$t>::ONE,
                    ReduceOp::Min => <$t>::INFINITY,
                    ReduceOp::Max => <$t>::NEG_INFINITY,
                }
            }

            fn reduce(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                let w = |f: fn(f32, f32) -> f32| {
                    move |a: $t, b: $t| <$t>::from_f32(f(a.to_f32(), b.to_f32()))
                };
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_with(acc, x, w(|a, b| a + b)),
                    ReduceOp::Prod => zip_with(acc, x, w(|a, b| a * b)),
                    ReduceOp::Min => zip_with(acc, x, w(f32::min)),
                    ReduceOp::Max => zip_with(acc, x, w(f32::max)),
                }
            }

            fn reduce_from_left(op: ReduceOp, acc: &mut [Self], x: &[Self]) {
                let w = |f: fn(f32, f32) -> f32| {
                    move |a: $t, b: $t| <$t>::from_f32(f(b.to_f32(), a.to_f32()))
                };
                match op {
                    ReduceOp::Sum | ReduceOp::Avg => zip_with(acc, x, w(|a, b| a + b)),
                    ReduceOp::Prod => zip_with(acc, x, w(|a, b| a * b)),
                    ReduceOp::Min => zip_with(acc, x, w(f32::min)),
                    ReduceOp::Max => zip_with(acc, x, w(f32::max)),
                }
            }

            fn divide(acc: &mut [Self], n: usize) {
                let n = n as f32;
                for a in acc {
                    *a = <$t>::from_f32(a.to_f32() / n);
                }
            }
        }
    };
}

half_float!(f16, F16);
half_float!(bf16, BF16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_neutral() {
        fn check<T: Element>(samples: &[T]) {
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
                let mut acc = samples.to_vec();
                let id = vec![T::identity(op); samples.len()];
                T::reduce(op, &mut acc, &id);
                assert_eq!(acc, samples, "{:?} {op:?}", T::DTYPE);
            }
        }
        check(&[1.5f32, -2.0, 0.0]);
        check(&[1.5f64, -2.0, 7.25]);
        check(&[f16::from_f32(3.0), f16::from_f32(-0.5)]);
        check(&[bf16::from_f32(3.0), bf16::from_f32(-0.5)]);
        check(&[i8::MIN, -1, 0, 5, i8::MAX]);
        check(&[i32::MIN, 7, i32::MAX]);
        check(&[i64::MIN, 7, i64::MAX]);
        check(&[0u8, 9, u8::MAX]);
        check(&[0u32, 9, u32::MAX]);
        check(&[0u64, 9, u64::MAX]);
        check(&[i16::MIN, -3, i16::MAX]);
        check(&[0u16, 9, u16::MAX]);
    }

    #[test]
    fn integers_wrap() {
        let mut a = [i8::MAX, 100u8 as i8];
        i8::reduce(ReduceOp::Sum, &mut a, &[1, 100]);
        assert_eq!(a, [i8::MIN, -56]);
        let mut b = [200u8];
        u8::reduce(ReduceOp::Prod, &mut b, &[2]);
        assert_eq!(b, [144]);
    }

    #[test]
    fn half_rounds_once_per_step() {
        // 2048 + 1 is not representable in f16; the widened sum rounds to even.
        let mut a = [f16::from_f32(2048.0)];
        f16::reduce(ReduceOp::Sum, &mut a, &[f16::from_f32(1.0)]);
        assert_eq!(a[0].to_f32(), 2048.0);
        let mut b = [bf16::from_f32(1.0)];
        bf16::reduce_from_left(ReduceOp::Max, &mut b, &[bf16::from_f32(4.0)]);
        assert_eq!(b[0].to_f32(), 4.0);
    }
}
