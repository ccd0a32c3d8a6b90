//! Which module holds which: the links torch's module-registration hook reports (`parent.attr =
//! child`), so a layer the user's code calls directly (a LightningModule's `self.encoder(x)`,
//! a local `model.backbone(x)`) is named inside the outermost module holding it, wherever that
//! module lives. Modules are the tracer's keys; an attribute assigned again holds only its
//! latest module.

use std::collections::HashMap;

/// The registration links seen while observing.
#[derive(Debug, Default)]
pub struct Holders {
    /// (parent, attribute) -> the module it holds now.
    held: HashMap<(u64, String), u64>,
    /// child -> the (parent, attribute) pairs that registered it (some may hold another now).
    parents: HashMap<u64, Vec<(u64, String)>>,
}

impl Holders {
    /// `parent.attr = child` (a registration; `child` None: the attribute was cleared).
    pub fn registered(&mut self, parent: u64, attr: &str, child: Option<u64>) {
        let slot = (parent, attr.to_owned());
        match child {
            Some(c) => {
                self.held.insert(slot.clone(), c);
                let links = self.parents.entry(c).or_default();
                if !links.contains(&slot) {
                    links.push(slot);
                }
            }
            None => {
                self.held.remove(&slot);
            }
        }
    }

    fn parents_of(&self, m: u64) -> impl Iterator<Item = u64> + '_ {
        self.parents
            .get(&m)
            .into_iter()
            .flatten()
            .filter(move |slot| self.held.get(*slot) == Some(&m))
            .map(|(p, _)| *p)
    }

    /// Modules held below `m` (through links that still hold), `m` excluded.
    fn size(&self, m: u64, children: &HashMap<u64, Vec<u64>>) -> usize {
        let mut seen = vec![m];
        let mut todo = vec![m];
        while let Some(x) = todo.pop() {
            for &c in children.get(&x).into_iter().flatten() {
                if !seen.contains(&c) {
                    seen.push(c);
                    todo.push(c);
                }
            }
        }
        seen.len() - 1
    }

    /// The outermost module holding `module` (through any chain of links that still hold it);
    /// of several, the one holding the most modules. None when nothing holds it.
    pub fn holder(&self, module: u64) -> Option<u64> {
        let mut tops = Vec::new();
        let mut seen = vec![module];
        let mut todo = vec![module];
        while let Some(m) = todo.pop() {
            let mut any = false;
            for p in self.parents_of(m) {
                any = true;
                if !seen.contains(&p) {
                    seen.push(p);
                    todo.push(p);
                }
            }
            if !any && m != module {
                tops.push(m);
            }
        }
        if tops.len() < 2 {
            return tops.pop();
        }
        let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
        for ((p, _), c) in &self.held {
            children.entry(*p).or_default().push(*c);
        }
        tops.into_iter()
            .max_by_key(|t| (self.size(*t, &children), std::cmp::Reverse(*t)))
    }
}

/// A model seen at the end of observation: its key, its object's identity, the identities of
/// the modules in its tree (itself included), whether it has parameters.
#[derive(Debug, Clone)]
pub struct Tree {
    pub key: u64,
    pub id: usize,
    pub modules: Vec<usize>,
    pub has_params: bool,
}

/// Which of the models seen are models of their own, smallest tree first: not one inside
/// another's tree (an encoder called on its own before its model ran). With whether more
/// than one of them has parameters: their parameters are then named under each model's name
/// (a parameter-free module called on its own, a loss or an activation, is not a model).
pub fn models_of_their_own(trees: &[Tree]) -> (Vec<u64>, bool) {
    let inside = |t: &Tree| {
        trees
            .iter()
            .any(|o| o.key != t.key && o.modules.contains(&t.id))
    };
    let mut tops: Vec<&Tree> = trees.iter().filter(|t| !inside(t)).collect();
    tops.sort_by_key(|t| t.modules.len());
    let multi = tops.iter().filter(|t| t.has_params).count() > 1;
    (tops.iter().map(|t| t.key).collect(), multi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_named_inside_the_outermost_module_holding_it() {
        // lit (1) holds encoder (2) and decoder (3); encoder holds a Linear (4).
        let mut h = Holders::default();
        h.registered(2, "0", Some(4));
        h.registered(1, "encoder", Some(2));
        h.registered(1, "decoder", Some(3));
        assert_eq!(h.holder(2), Some(1));
        assert_eq!(h.holder(4), Some(1));
        assert_eq!(h.holder(1), None);
        assert_eq!(h.holder(9), None);
    }

    #[test]
    fn a_replaced_attribute_no_longer_holds_and_the_largest_holder_wins() {
        let mut h = Holders::default();
        h.registered(1, "head", Some(2));
        h.registered(1, "head", Some(3)); // replaced: 2 is held by nothing now
        assert_eq!(h.holder(2), None);
        assert_eq!(h.holder(3), Some(1));
        // A shared layer (5) held by a small wrapper (6) and by a model (7) holding 3 more.
        h.registered(6, "layer", Some(5));
        h.registered(7, "layer", Some(5));
        h.registered(7, "a", Some(8));
        h.registered(7, "b", Some(9));
        assert_eq!(h.holder(5), Some(7));
        h.registered(7, "layer", None);
        assert_eq!(h.holder(5), Some(6));
    }

    #[test]
    fn models_inside_others_are_not_models_of_their_own() {
        let tree = |key, id, modules: &[usize], has_params| Tree {
            key,
            id,
            modules: modules.to_vec(),
            has_params,
        };
        // A GAN: generator (2 modules) and discriminator (3); the generator's first layer was
        // called on its own first; a loss module has no parameters.
        let trees = [
            tree(1, 10, &[10, 11], true),
            tree(2, 20, &[20, 21, 22], true),
            tree(3, 11, &[11], true),
            tree(4, 30, &[30], false),
        ];
        assert_eq!(models_of_their_own(&trees), (vec![4, 1, 2], true));
        let (tops, multi) = models_of_their_own(&trees[2..]);
        assert_eq!(tops, vec![3, 4]);
        assert!(!multi, "one model with parameters and a loss: no prefixes");
    }
}
