//! What a torch function is, to the op log: its display name and its [`Kind`], decided once
//! per function object from its qualified name (and, for descriptors, its owner's name).

use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Plain,
    Detach,
    Data,
    /// `.item()`, `.tolist()`, `.numpy()`, NumPy reading a tensor (`Tensor.__array__`): the
    /// value leaves autograd as a Python object.
    ValueExit,
    /// `torch.tensor`, `torch.as_tensor`, `torch.from_numpy`, `Tensor.new_tensor`.
    Construct,
    NonDiff,
    GradMode,
    RequiresGrad,
    /// `torch.autograd.grad`: without `create_graph=True` its result has no history.
    AutogradGrad,
    /// Ops whose gradient is zero where they saturate or mask (clamp, where, masked_fill).
    Saturating,
    /// Never a cut: constructors shaped like an input (`zeros_like`, `new_zeros`), metadata
    /// (`.shape`, `.device` getters).
    Ignore,
    /// `p.grad` read: never a cut; the tensor it returns is `p`'s gradient.
    GradRead,
    /// `p.grad = value`.
    GradSet,
}

#[derive(Clone, Debug)]
pub struct FuncInfo {
    pub name: Arc<str>,
    pub kind: Kind,
    pub inplace: bool,
    /// The output is a product of its inputs (`mul`, `matmul`, `linear`, a convolution,
    /// attention): an all-zero input makes the gradient of every other input zero.
    pub product: bool,
    /// A tensor method whose other tensor arguments give only a dtype, device or shape
    /// (`x.to(other)`, `x.type_as(other)`): the gradient goes to the receiver alone.
    pub receiver_only: bool,
    /// The output is a view of the first argument (`.data`, `.detach()`, `.view()`, basic
    /// indexing): writing it writes the argument (`p.grad.data.zero_()`).
    pub alias: bool,
    /// `t.data = value`: replaces the receiver's contents, a write to it.
    pub sets_data: bool,
}

/// Ops whose output shares the storage of their first argument (see [`FuncInfo::alias`]).
/// Tensor attributes whose getter returns a view of the tensor: an op on it, not metadata.
const VIEW_ATTRS: &[&str] = &[
    "T.__get__",
    "mT.__get__",
    "H.__get__",
    "mH.__get__",
    "real.__get__",
    "imag.__get__",
];

pub const ALIAS: &[&str] = &[
    "data.__get__",
    "detach",
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "flatten",
    "__getitem__",
    "narrow",
    "select",
    "squeeze",
    "unsqueeze",
    "t",
    "transpose",
    "permute",
    "unflatten",
    "as_strided",
    "expand",
    "expand_as",
    "ravel",
    "view_as_real",
    "unbind",
    "split",
    "chunk",
];

/// Ops whose output multiplies its inputs (see [`FuncInfo::product`]).
pub const PRODUCT: &[&str] = &[
    "mul",
    "mul_",
    "rmul",
    "imul",
    "multiply",
    "matmul",
    "rmatmul",
    "mm",
    "bmm",
    "baddbmm",
    "addmm",
    "addbmm",
    "mv",
    "dot",
    "outer",
    "einsum",
    "tensordot",
    "linear",
    "bilinear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "scaled_dot_product_attention",
];

/// Ops whose output has no useful gradient: argmax-like, rounding, comparisons, integer and
/// bool casts, index-producing ops.
pub const NON_DIFF: &[&str] = &[
    "argmax",
    "argmin",
    "argsort",
    "round",
    "floor",
    "ceil",
    "sign",
    "trunc",
    "frac",
    "eq",
    "ne",
    "lt",
    "gt",
    "le",
    "ge",
    "__eq__",
    "__ne__",
    "__lt__",
    "__gt__",
    "__le__",
    "__ge__",
    "long",
    "int",
    "bool",
    "byte",
    "char",
    "short",
    "searchsorted",
    "bucketize",
    "isnan",
    "isinf",
    "isfinite",
    "nonzero",
    "logical_and",
    "logical_or",
    "logical_not",
    "one_hot",
    "unique",
    "histc",
];

/// Name and kind of a torch function from its `__qualname__` (or `__name__`) and, for a
/// descriptor's `__get__`/`__set__`, its owner's `__name__` (`Tensor.data` arrives so).
pub fn classify(qual: &str, owner: Option<&str>) -> FuncInfo {
    let mut short = qual.rsplit('.').next().unwrap_or(qual).to_owned();
    let is_descriptor = qual.starts_with("getset_descriptor.");
    if is_descriptor {
        short = format!("{}.{}", owner.unwrap_or_default(), short);
    }
    let last = qual.rsplit('.').next().unwrap_or(qual);
    let name = if is_descriptor {
        format!("Tensor.{}", owner.unwrap_or_default())
    } else if qual.starts_with("TensorBase.")
        || qual.starts_with("_TensorBase.")
        || qual.starts_with("Tensor.")
    {
        // `_TensorBase` is torch 2.1–2.2's name of the C base class, `TensorBase` later ones'.
        format!("Tensor.{last}")
    } else if qual.starts_with("_VariableFunctionsClass.") {
        format!("torch.{last}")
    } else {
        qual.to_owned()
    };
    let base = short.trim_start_matches("__").trim_end_matches("__");
    let kind = match short.as_str() {
        "detach" | "detach_" => Kind::Detach,
        "data.__get__" => Kind::Data,
        "grad.__get__" => Kind::GradRead,
        "grad.__set__" => Kind::GradSet,
        // `t.T`, `t.mT`, `t.H`, `t.real`: a view of the tensor, which carries what it carries
        // (`Categorical.sample` transposes `multinomial`'s draws).
        _ if is_descriptor && VIEW_ATTRS.contains(&short.as_str()) => Kind::Plain,
        _ if is_descriptor && !short.ends_with(".__set__") => Kind::Ignore,
        s if s.ends_with("_like") || (s.starts_with("new_") && s != "new_tensor") => Kind::Ignore,
        "size" | "dim" | "numel" | "stride" | "element_size" | "is_floating_point"
        | "is_complex" | "__len__" | "__format__" | "__repr__" | "__hash__" | "__bool__"
        | "data_ptr" | "get_device" => Kind::Ignore,
        // `__array__`: NumPy reading a tensor (`np.asarray(t)`, `np.tanh(t)`), as `.numpy()`;
        // `float(t)`: a Python number, as `.item()` (`int(t)` is a count or an index, which
        // has no gradient anyway).
        "item" | "tolist" | "numpy" | "__array__" | "__float__" | "__complex__" => Kind::ValueExit,
        "grad" if qual == "grad" => Kind::AutogradGrad,
        "clamp" | "clamp_" | "clip" | "clip_" | "clamp_min" | "clamp_max" | "hardtanh"
        | "hardtanh_" | "relu6" | "threshold" | "where" | "masked_fill" | "masked_fill_" => {
            Kind::Saturating
        }
        // `Parameter`: `nn.Parameter(t)`, shown to the mode by the tracer.
        "tensor" | "as_tensor" | "from_numpy" | "new_tensor" | "asarray" | "Parameter" => {
            Kind::Construct
        }
        "_set_grad_enabled" | "set_grad_enabled" => Kind::GradMode,
        "requires_grad_" | "requires_grad.__set__" => Kind::RequiresGrad,
        _ if NON_DIFF.contains(&base) => Kind::NonDiff,
        _ => Kind::Plain,
    };
    let inplace = (short.ends_with('_')
        && !short.ends_with("__")
        && !matches!(kind, Kind::Detach | Kind::RequiresGrad))
        || short.starts_with("__i") && short.ends_with("__")
        || short == "__setitem__";
    FuncInfo {
        name: name.into(),
        kind,
        inplace,
        product: PRODUCT.contains(&base),
        receiver_only: qual.contains("Tensor")
            && matches!(
                short.as_str(),
                "to" | "type_as" | "view_as" | "expand_as" | "reshape_as"
            ),
        alias: ALIAS.contains(&short.as_str()),
        sets_data: short == "data.__set__",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds() {
        let c = classify("TensorBase.detach", None);
        assert_eq!(
            (&*c.name, c.kind, c.inplace),
            ("Tensor.detach", Kind::Detach, false)
        );
        let c = classify("getset_descriptor.__get__", Some("data"));
        assert_eq!((&*c.name, c.kind), ("Tensor.data", Kind::Data));
        let c = classify("getset_descriptor.__get__", Some("shape"));
        assert_eq!(c.kind, Kind::Ignore);
        let c = classify("getset_descriptor.__get__", Some("mT"));
        assert_eq!((&*c.name, c.kind), ("Tensor.mT", Kind::Plain));
        let c = classify("_VariableFunctionsClass.argmax", None);
        assert_eq!((&*c.name, c.kind), ("torch.argmax", Kind::NonDiff));
        assert!(classify("TensorBase.add_", None).inplace);
        assert!(classify("TensorBase.__rmul__", None).product);
        assert!(classify("_VariableFunctionsClass.matmul", None).product);
        assert!(classify("scaled_dot_product_attention", None).product);
        assert!(!classify("TensorBase.add", None).product);
        assert!(classify("TensorBase.__iadd__", None).inplace);
        assert!(!classify("TensorBase.requires_grad_", None).inplace);
        assert_eq!(classify("grad", None).kind, Kind::AutogradGrad);
        assert_eq!(
            classify("_VariableFunctionsClass.zeros_like", None).kind,
            Kind::Ignore
        );
        assert_eq!(
            classify("TensorBase.new_tensor", None).kind,
            Kind::Construct
        );
        assert_eq!(classify("_set_grad_enabled", None).kind, Kind::GradMode);
        assert_eq!(classify("nn.Parameter", None).kind, Kind::Construct);
        let c = classify("Tensor.__array__", None);
        assert_eq!((&*c.name, c.kind), ("Tensor.__array__", Kind::ValueExit));
        // torch 2.1–2.2 name the base class `_TensorBase`.
        let c = classify("_TensorBase.detach", None);
        assert_eq!((&*c.name, c.kind), ("Tensor.detach", Kind::Detach));
        assert_eq!(&*classify("_TensorBase.add_", None).name, "Tensor.add_");
    }

    #[test]
    fn non_diff_list_has_the_documented_ops() {
        for op in [
            "argmax", "round", "floor", "ceil", "sign", "long", "eq", "gt",
        ] {
            assert!(NON_DIFF.contains(&op), "{op}");
        }
    }
}
