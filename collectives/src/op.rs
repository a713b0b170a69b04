//! Reduction operators and element type tags.

/// How a reduction combines contributions.
///
/// `Avg` is defined for floating-point elements only (the facade rejects it
/// for integers with `InvalidArgument`); it reduces as `Sum` and divides by
/// the number of contributions once, at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum; integers wrap.
    Sum,
    /// Element-wise product; integers wrap.
    Prod,
    /// Element-wise minimum.
    Min,
    /// Element-wise maximum.
    Max,
    /// Element-wise mean (sum, then one division); floats only.
    Avg,
}

impl ReduceOp {
    /// Every operator, in wire-id order.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
    ];

    /// Stable identifier used on the wire.
    pub fn id(self) -> u8 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
            ReduceOp::Avg => 4,
        }
    }

    /// The inverse of [`ReduceOp::id`].
    pub fn from_id(id: u8) -> Option<ReduceOp> {
        ReduceOp::ALL.get(usize::from(id)).copied()
    }

    /// Lower-case name, as in error messages.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}

/// Run `$body` with `$T` the element type of the [`DType`] `$d`: the one
/// dispatch from a type known at run time to the generic calls (the C
/// and Python front ends go through it).
///
/// ```
/// use meshwork_collectives::{with_dtype, DType};
/// let size = with_dtype!(DType::BF16, T => std::mem::size_of::<T>());
/// assert_eq!(size, DType::BF16.size());
/// ```
#[macro_export]
macro_rules! with_dtype {
    ($d:expr, $T:ident => $body:expr) => {
        match $d {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
        }
    };
}

/// The element types meshwork reduces; each [`crate::Element`] has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `half::f16` (reduced in `f32`).
    F16,
    /// `half::bf16` (reduced in `f32`).
    BF16,
    /// `i8`.
    I8,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u8`.
    U8,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `i16`.
    I16,
    /// `u16`.
    U16,
}

impl DType {
    /// Every type, in wire-id order.
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::U64,
        DType::I16,
        DType::U16,
    ];

    /// Stable identifier used on the wire.
    pub fn id(self) -> u8 {
        DType::ALL
            .iter()
            .position(|d| *d == self)
            .map_or(u8::MAX, |i| i as u8)
    }

    /// The inverse of [`DType::id`].
    pub fn from_id(id: u8) -> Option<DType> {
        DType::ALL.get(usize::from(id)).copied()
    }

    /// Rust spelling of the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::I16 => "i16",
            DType::U16 => "u16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Whether `ReduceOp::Avg` applies.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}
