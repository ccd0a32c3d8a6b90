//! Graph walks over live autograd nodes (`grad_fn` objects).

use gradsleuth_graph::{walk as walk_graph, walk_visit, GraphSource};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// Reads nodes through `next_functions` and `AccumulateGrad.variable`.
///
/// Whether a node type carries `variable` is looked up once per type: asking every node
/// would raise and discard an `AttributeError` per node, the most expensive thing in a walk.
pub(crate) struct Live<'py> {
    py: Python<'py>,
    leaf_types: rustc_hash::FxHashMap<usize, bool>,
}

impl<'py> Live<'py> {
    pub(crate) fn new(py: Python<'py>) -> Self {
        Live {
            py,
            leaf_types: Default::default(),
        }
    }
}

/// A node kept past the backward that frees its graph: a custom `autograd.Function`'s node
/// is, to Python, its `ctx`, which holds the native node only weakly on older torch (2.1:
/// after `backward()` its `next_functions` raises and a walk from it finds nothing). Such a
/// node is kept as `(node, next_functions)`, its edges read while the graph lives; other
/// nodes are kept as they are. [`Live`] walks either.
pub(crate) fn pin<'py>(
    node: Bound<'py, PyAny>,
    function_base: &Bound<'py, PyAny>,
) -> Bound<'py, PyAny> {
    if !node.is_instance(function_base).unwrap_or(false) {
        return node;
    }
    match node.getattr(pyo3::intern!(node.py(), "next_functions")) {
        Ok(next) => PyTuple::new(node.py(), [node.clone(), next])
            .map(|t| t.into_any())
            .unwrap_or(node),
        Err(_) => node,
    }
}

/// The node itself, pinned or not.
pub(crate) fn unpin<'py>(node: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    pinned(node).map_or_else(|| node.clone(), |(n, _)| n)
}

/// The node and its edges, when `node` was kept by [`pin`].
pub(crate) fn pinned<'py>(
    node: &Bound<'py, PyAny>,
) -> Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let t = node.cast::<PyTuple>().ok()?;
    Some((t.get_item(0).ok()?, t.get_item(1).ok()?))
}

impl<'py> GraphSource for Live<'py> {
    type Node = Bound<'py, PyAny>;
    type Id = usize;
    type Error = PyErr;

    fn id(&self, node: &Self::Node) -> usize {
        // A kept node is the node itself however it was kept: one identity for a walk that
        // starts at it and for one that reaches it through an edge.
        pinned(node).map_or(node.as_ptr() as usize, |(n, _)| n.as_ptr() as usize)
    }

    fn children(&mut self, node: &Self::Node, out: &mut Vec<Self::Node>) -> PyResult<()> {
        let next = match pinned(node) {
            Some((_, next)) => next,
            None => match node.getattr(pyo3::intern!(self.py, "next_functions")) {
                Ok(n) => n,
                Err(_) => return Ok(()),
            },
        };
        let next = next.cast_into::<PyTuple>().map_err(PyErr::from)?;
        // Borrowed items: no reference count traffic for the (node, index) pairs.
        for edge in next.iter_borrowed() {
            let edge = edge.cast::<PyTuple>().map_err(PyErr::from)?;
            let child = edge.get_borrowed_item(0)?;
            if !child.is_none() {
                out.push(child.to_owned());
            }
        }
        Ok(())
    }

    fn leaf(&mut self, node: &Self::Node) -> PyResult<Option<u64>> {
        let ty = node.get_type();
        let is_leaf = match self.leaf_types.get(&(ty.as_ptr() as usize)) {
            Some(b) => *b,
            None => {
                let b = ty.hasattr(pyo3::intern!(self.py, "variable"))?;
                self.leaf_types.insert(ty.as_ptr() as usize, b);
                b
            }
        };
        if !is_leaf {
            return Ok(None);
        }
        match node.getattr(pyo3::intern!(self.py, "variable")) {
            Ok(v) => Ok(Some(v.as_ptr() as u64)),
            Err(_) => Ok(None),
        }
    }
}

/// Walks the graph from `grad_fn` (or a list of them), at most `budget` nodes and
/// `MAX_DEPTH` levels. Returns `{"nodes", "edges", "leaves": [id(tensor), ...], "truncated",
/// "depth"}`.
#[pyfunction]
#[pyo3(signature = (roots, budget=10_000_000))]
pub fn walk<'py>(
    py: Python<'py>,
    roots: Bound<'py, PyAny>,
    budget: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let w = walk_graph(&mut Live::new(py), root_list(roots)?, budget)?;
    let d = PyDict::new(py);
    d.set_item("nodes", w.nodes)?;
    d.set_item("edges", w.edges)?;
    d.set_item("leaves", w.leaves)?;
    d.set_item("truncated", w.truncated)?;
    d.set_item("depth", w.depth)?;
    Ok(d)
}

fn root_list<'py>(roots: Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let roots: Vec<Bound<'py, PyAny>> =
        if roots.is_instance_of::<pyo3::types::PyList>() || roots.is_instance_of::<PyTuple>() {
            roots.try_iter()?.collect::<PyResult<_>>()?
        } else {
            vec![roots]
        };
    Ok(roots.into_iter().filter(|r| !r.is_none()).collect())
}

/// Every node reachable from `roots` (a `grad_fn` or a list of them), breadth-first, at most
/// `budget` of them.
#[pyfunction]
#[pyo3(signature = (roots, budget=10_000_000))]
pub fn graph_nodes<'py>(
    py: Python<'py>,
    roots: Bound<'py, PyAny>,
    budget: usize,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut nodes = Vec::new();
    walk_visit(&mut Live::new(py), root_list(roots)?, budget, |_, n| {
        nodes.push(n.clone());
        Ok(())
    })?;
    Ok(nodes)
}

/// The nodes reachable from `roots`, by autograd sequence number counted from `base` (the
/// number the forward that made them started at): `{offset: node type name}`. The same forward
/// replayed makes its nodes in the same order, so a replayed node's offset finds its twin.
/// Leaf-accumulating nodes have no sequence number of their own and are left out.
#[pyfunction]
#[pyo3(signature = (roots, base, budget=10_000_000))]
pub fn sequence_index<'py>(
    py: Python<'py>,
    roots: Bound<'py, PyAny>,
    base: i64,
    budget: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let index = PyDict::new(py);
    let seq = pyo3::intern!(py, "_sequence_nr");
    walk_visit(&mut Live::new(py), root_list(roots)?, budget, |g, n| {
        if g.leaf(n)?.is_some() {
            return Ok(());
        }
        let Ok(nr) = n.call_method0(seq).and_then(|v| v.extract::<u64>()) else {
            return Ok(());
        };
        index.set_item(nr as i64 - base, n.get_type().name()?)?;
        Ok(())
    })?;
    Ok(index)
}

/// Names of the nodes from `grad_fn` down its first inputs to the leaf it came from
/// (`["ToCopyBackward0", "AccumulateGrad"]`), at most `limit` long.
#[pyfunction]
#[pyo3(signature = (grad_fn, limit=16))]
pub fn grad_fn_chain(
    py: Python<'_>,
    grad_fn: Bound<'_, PyAny>,
    limit: usize,
) -> PyResult<Vec<String>> {
    let mut out = Vec::new();
    let mut node = grad_fn;
    let mut src = Live::new(py);
    let mut kids = Vec::new();
    while !node.is_none() && out.len() < limit {
        out.push(node.get_type().name()?.to_string());
        kids.clear();
        src.children(&node, &mut kids)?;
        match kids.drain(..).next() {
            Some(k) => node = k,
            None => break,
        }
    }
    Ok(out)
}
