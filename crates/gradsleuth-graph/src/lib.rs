//! Autograd graph walks, written once against the [`GraphSource`] trait.
//!
//! The PyO3 module implements [`GraphSource`] over live `grad_fn` objects
//! (`next_functions`, `AccumulateGrad.variable`); tests implement it over synthetic graphs.
//! The walk is iterative (a million-node chain does not overflow the stack), visits each
//! node once (identity from [`GraphSource::id`]), and can stop at a node budget.
//!
//! gradsleuth does **not** walk the graph on the hot path: which parameters a backward reached
//! comes from post-accumulate-grad hooks. A walk runs only when a chain or a picture is needed.
//!
//! A walk holds every node it has read until it returns, so identities that are addresses of
//! handles (a Python wrapper's, which before torch 2.13 dies with its last reference) are
//! never reused within a walk; `tests::ids_of_dead_handles_are_reused` holds it.
//!
//! Walks stop [`MAX_DEPTH`] levels below their roots. Reading a node from Python gives it a
//! Python object that the node then keeps, and torch (2.15) frees a chain of such nodes by
//! recursion through their objects' deallocators, not by its iterative deleter: once a chain
//! of about 45,000 of them is freed, the user's process overflows its 8 MB stack and
//! segfaults, long after the walk (`bench/run.py graph` found it). Bounding the depth of every
//! walk bounds that recursion.

use std::hash::Hash;

use rustc_hash::FxHashSet as HashSet;

/// Levels below the roots a walk goes at most: a quarter of the depth at which freeing the
/// nodes a walk has read overflows an 8 MB stack.
pub const MAX_DEPTH: usize = 10_000;

/// What a walk needs to know about a node.
pub trait GraphSource {
    type Node;
    type Id: Eq + Hash + Copy;
    type Error;
    /// Stable identity of a node for the duration of the walk.
    fn id(&self, node: &Self::Node) -> Self::Id;
    /// Appends the node's inputs (its `next_functions`, `None` entries skipped) to `out`.
    fn children(&mut self, node: &Self::Node, out: &mut Vec<Self::Node>)
        -> Result<(), Self::Error>;
    /// For a leaf-accumulating node, the identity of the tensor it accumulates into. Only
    /// asked of nodes without inputs (a leaf-accumulating node has none).
    fn leaf(&mut self, node: &Self::Node) -> Result<Option<u64>, Self::Error>;
}

/// Result of a walk.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Walk {
    /// Nodes visited.
    pub nodes: usize,
    /// Edges followed.
    pub edges: usize,
    /// Leaf tensors reached, in the order first reached.
    pub leaves: Vec<u64>,
    /// The walk stopped at its node budget or at [`MAX_DEPTH`].
    pub truncated: bool,
    /// Levels below the roots reached (breadth-first: the shortest distance).
    pub depth: usize,
}

/// Breadth-first walk from `roots`, at most `budget` nodes.
pub fn walk<G: GraphSource>(
    g: &mut G,
    roots: Vec<G::Node>,
    budget: usize,
) -> Result<Walk, G::Error> {
    walk_visit(g, roots, budget, |_, _| Ok(()))
}

/// [`walk`], handing each node to `visit` once, in breadth-first order.
pub fn walk_visit<G: GraphSource>(
    g: &mut G,
    roots: Vec<G::Node>,
    budget: usize,
    mut visit: impl FnMut(&mut G, &G::Node) -> Result<(), G::Error>,
) -> Result<Walk, G::Error> {
    let mut seen: HashSet<G::Id> = HashSet::default();
    seen.reserve(1024);
    let mut seen_leaves: HashSet<u64> = HashSet::default();
    let mut out = Walk::default();
    let mut frontier: Vec<G::Node> = Vec::new();
    for r in roots {
        if seen.insert(g.id(&r)) {
            frontier.push(r);
        }
    }
    let mut next: Vec<G::Node> = Vec::new();
    let mut kids: Vec<G::Node> = Vec::new();
    // Every node read stays held until the walk returns: a node's identity may be the address
    // of a handle that dies with the last reference to it (before torch 2.13 a C++ node does
    // not keep its Python wrapper alive), and a new handle at a reused address would pass for
    // a node already seen.
    let mut held: Vec<G::Node> = Vec::new();
    while !frontier.is_empty() {
        if out.depth == MAX_DEPTH {
            out.truncated = true;
            break;
        }
        if out.nodes > 0 {
            out.depth += 1;
        }
        for node in frontier.drain(..) {
            if out.nodes >= budget {
                out.truncated = true;
                return Ok(out);
            }
            out.nodes += 1;
            visit(g, &node)?;
            kids.clear();
            g.children(&node, &mut kids)?;
            if kids.is_empty() {
                if let Some(leaf) = g.leaf(&node)? {
                    if seen_leaves.insert(leaf) {
                        out.leaves.push(leaf);
                    }
                }
            }
            out.edges += kids.len();
            for k in kids.drain(..) {
                if seen.insert(g.id(&k)) {
                    next.push(k);
                }
            }
            held.push(node);
        }
        std::mem::swap(&mut frontier, &mut next);
    }
    Ok(out)
}

/// Depth-first path from `root` to the node accumulating into `leaf`, as node indices into
/// the order `name` is called in; returns node names root-first. Used for chains in words.
pub fn path_to_leaf<G: GraphSource>(
    g: &mut G,
    root: G::Node,
    leaf: u64,
    budget: usize,
    mut name: impl FnMut(&mut G, &G::Node) -> String,
) -> Result<Option<Vec<String>>, G::Error>
where
    G::Node: Clone,
{
    let mut seen: HashSet<G::Id> = HashSet::default();
    // Stack of (node, depth); `path` holds the names along the current branch.
    let mut stack: Vec<(G::Node, usize)> = vec![(root, 0)];
    let mut path: Vec<String> = Vec::new();
    let mut kids = Vec::new();
    let mut visited = 0usize;
    // Held until the search returns (see `walk_visit`: identities of dead handles are reused).
    let mut held: Vec<G::Node> = Vec::new();
    while let Some((node, depth)) = stack.pop() {
        if !seen.insert(g.id(&node)) {
            continue;
        }
        held.push(node.clone());
        visited += 1;
        if visited > budget {
            return Ok(None);
        }
        path.truncate(depth);
        path.push(name(g, &node));
        if g.leaf(&node)? == Some(leaf) {
            return Ok(Some(path));
        }
        if depth == MAX_DEPTH {
            continue;
        }
        kids.clear();
        g.children(&node, &mut kids)?;
        for k in kids.drain(..).rev() {
            stack.push((k, depth + 1));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// Node i has children `adj[i]`; node i accumulates into leaf `leaf[i]`.
    struct Synthetic {
        adj: Vec<Vec<usize>>,
        leaf: Vec<Option<u64>>,
    }

    impl GraphSource for Synthetic {
        type Node = usize;
        type Id = usize;
        type Error = Infallible;
        fn id(&self, n: &usize) -> usize {
            *n
        }
        fn children(&mut self, n: &usize, out: &mut Vec<usize>) -> Result<(), Infallible> {
            out.extend(&self.adj[*n]);
            Ok(())
        }
        fn leaf(&mut self, n: &usize) -> Result<Option<u64>, Infallible> {
            Ok(self.leaf[*n])
        }
    }

    /// loss(0) <- add(1) <- {mm(2) <- AccumulateGrad(w1=4), mm(3) <- AccumulateGrad(w2=5) and
    /// a shared input node 2}: a diamond, so node 2 must be counted once.
    fn diamond() -> Synthetic {
        Synthetic {
            adj: vec![vec![1], vec![2, 3], vec![4], vec![2, 5], vec![], vec![]],
            leaf: vec![None, None, None, None, Some(10), Some(11)],
        }
    }

    #[test]
    fn visits_shared_nodes_once_and_collects_leaves() {
        let w = walk(&mut diamond(), vec![0], usize::MAX).unwrap();
        assert_eq!(w.nodes, 6);
        assert_eq!(w.edges, 6);
        assert_eq!(w.leaves, vec![10, 11]);
        assert!(!w.truncated);
    }

    #[test]
    fn a_cut_graph_does_not_reach_the_detached_leaf() {
        // The edge 3 -> 5 is gone (what `.detach()` does to the graph).
        let mut g = diamond();
        g.adj[3] = vec![2];
        let w = walk(&mut g, vec![0], usize::MAX).unwrap();
        assert_eq!(w.leaves, vec![10]);
    }

    #[test]
    fn visits_every_node_once_in_breadth_first_order() {
        let mut seen = Vec::new();
        let w = walk_visit(&mut diamond(), vec![0], 100, |_, n| {
            seen.push(*n);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(w.nodes, 6);
    }

    #[test]
    fn stops_at_max_depth() {
        // A chain longer than MAX_DEPTH: the walk reads MAX_DEPTH + 1 levels and says so.
        let n = MAX_DEPTH + 50;
        let mut g = Synthetic {
            adj: (0..n)
                .map(|i| if i + 1 < n { vec![i + 1] } else { vec![] })
                .collect(),
            leaf: (0..n).map(|i| (i + 1 == n).then_some(7)).collect(),
        };
        let w = walk(&mut g, vec![0], usize::MAX).unwrap();
        assert!(w.truncated);
        assert_eq!((w.nodes, w.depth), (MAX_DEPTH + 1, MAX_DEPTH));
        assert!(w.leaves.is_empty(), "the leaf is below the cap");
        assert_eq!(
            path_to_leaf(&mut g, 0, 7, usize::MAX, |_, n| n.to_string()).unwrap(),
            None
        );
        let short = walk(&mut diamond(), vec![0], 100).unwrap();
        assert_eq!((short.depth, short.truncated), (3, false));
    }

    #[test]
    fn stops_at_the_budget() {
        let w = walk(&mut diamond(), vec![0], 3).unwrap();
        assert!(w.truncated);
        assert_eq!(w.nodes, 3);
    }

    #[test]
    fn long_chains_do_not_overflow_the_stack() {
        // As deep as a walk goes (a recursive walk would overflow a small test-thread stack).
        let n = MAX_DEPTH + 1;
        let mut adj: Vec<Vec<usize>> = (0..n)
            .map(|i| if i + 1 < n { vec![i + 1] } else { vec![] })
            .collect();
        adj.shrink_to_fit();
        let mut leaf = vec![None; n];
        leaf[n - 1] = Some(7);
        let mut g = Synthetic { adj, leaf };
        let w = walk(&mut g, vec![0], usize::MAX).unwrap();
        assert_eq!((w.nodes, w.leaves.clone()), (n, vec![7]));
        let path = path_to_leaf(&mut g, 0, 7, usize::MAX, |_, n| n.to_string())
            .unwrap()
            .unwrap();
        assert_eq!(path.len(), n);
    }

    #[test]
    fn path_names_the_nodes_from_root_to_leaf() {
        let mut g = diamond();
        let names = ["loss", "add", "mm_a", "mm_b", "w1", "w2"];
        let p = path_to_leaf(&mut g, 0, 11, 100, |_, n| names[*n].to_string())
            .unwrap()
            .unwrap();
        assert_eq!(p, vec!["loss", "add", "mm_b", "w2"]);
        assert!(
            path_to_leaf(&mut g, 0, 99, 100, |_, n| names[*n].to_string())
                .unwrap()
                .is_none()
        );
    }

    /// A source whose node identities are slots handed to live handles only: a node read
    /// again after its last handle died gets the lowest free slot, possibly one a different
    /// node had (what `id()` of a Python wrapper does before torch 2.13).
    mod reused {
        use super::super::*;
        use std::cell::RefCell;
        use std::convert::Infallible;
        use std::rc::Rc;

        #[derive(Default)]
        struct Slots {
            free: Vec<usize>,
            next: usize,
            live: Vec<Option<std::rc::Weak<Handle>>>,
        }

        struct Handle {
            node: usize,
            slot: usize,
            slots: Rc<RefCell<Slots>>,
        }

        impl Drop for Handle {
            fn drop(&mut self) {
                let mut s = self.slots.borrow_mut();
                s.free.push(self.slot);
                s.free.sort_unstable_by(|a, b| b.cmp(a));
            }
        }

        struct Reusing {
            adj: Vec<Vec<usize>>,
            leaf: Vec<Option<u64>>,
            slots: Rc<RefCell<Slots>>,
        }

        impl Reusing {
            /// The node's handle: its live one, else a new one at the lowest free slot.
            fn handle(&self, node: usize) -> Rc<Handle> {
                let mut s = self.slots.borrow_mut();
                if s.live.len() <= node {
                    s.live.resize(node + 1, None);
                }
                if let Some(h) = s.live[node].as_ref().and_then(|w| w.upgrade()) {
                    return h;
                }
                let slot = s.free.pop().unwrap_or_else(|| {
                    s.next += 1;
                    s.next - 1
                });
                let h = Rc::new(Handle {
                    node,
                    slot,
                    slots: self.slots.clone(),
                });
                s.live[node] = Some(Rc::downgrade(&h));
                h
            }
        }

        impl GraphSource for Reusing {
            type Node = Rc<Handle>;
            type Id = usize;
            type Error = Infallible;
            fn id(&self, n: &Rc<Handle>) -> usize {
                n.slot
            }
            fn children(
                &mut self,
                n: &Rc<Handle>,
                out: &mut Vec<Rc<Handle>>,
            ) -> Result<(), Infallible> {
                for &c in &self.adj[n.node] {
                    let h = self.handle(c);
                    out.push(h);
                }
                Ok(())
            }
            fn leaf(&mut self, n: &Rc<Handle>) -> Result<Option<u64>, Infallible> {
                Ok(self.leaf[n.node])
            }
        }

        /// A 27-node step: a chain of 24 ops over 3 parameters' accumulators.
        fn step() -> Reusing {
            let n = 27;
            let mut adj: Vec<Vec<usize>> = (0..24).map(|i| vec![i + 1]).collect();
            adj[23] = vec![24, 25, 26];
            adj[8].push(25);
            adj.extend([vec![], vec![], vec![]]);
            let mut leaf = vec![None; n];
            leaf[24] = Some(100);
            leaf[25] = Some(101);
            leaf[26] = Some(102);
            Reusing {
                adj,
                leaf,
                slots: Rc::new(RefCell::new(Slots::default())),
            }
        }

        #[test]
        fn ids_of_dead_handles_are_reused() {
            let mut g = step();
            let root = g.handle(0);
            let w = walk(&mut g, vec![root.clone()], usize::MAX).unwrap();
            assert_eq!(w.nodes, 27, "every node seen once");
            let mut leaves = w.leaves.clone();
            leaves.sort_unstable();
            assert_eq!(leaves, vec![100, 101, 102]);
            let path = path_to_leaf(&mut g, root, 102, usize::MAX, |_, n| n.node.to_string())
                .unwrap()
                .expect("the leaf is found");
            assert_eq!(path.len(), 25);
        }
    }
}
