//! GS191 `compiled_region`: modules wrapped by `torch.compile` are seen as a whole (their
//! parameters, whether they ran) but their inner ops are not instrumented at op level.

use gradsleuth_model::{Finding, Severity};

use super::{module_name, Check};
use crate::Context;

pub const CHECK: Check = Check { code: "GS191", run };

fn run(ctx: &Context) -> Vec<Finding> {
    ctx.capture
        .modules
        .iter()
        .filter(|m| m.class == "OptimizedModule")
        .map(|m| {
            CHECK.finding(Severity::Info,
                format!("`{}` is compiled with torch.compile: a compiled region, not instrumented at op level.", module_name(m)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use gradsleuth_model::capture::ModuleKind;

    #[test]
    fn compiled_modules_are_named() {
        let mut s = healthy(1);
        s.module(
            7,
            "OptimizedModule",
            "block",
            Some(1),
            ModuleKind::Registered,
            1,
        );
        let f = s.run(&CHECK);
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("`block`"));
    }

    #[test]
    fn plain_modules_are_not() {
        assert!(healthy(1).run(&CHECK).is_empty());
    }
}
