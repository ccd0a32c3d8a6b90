//! PyTorch's in-place error, read: `[torch.FloatTensor [4, 8]], which is output 0 of
//! ReluBackward0, is at version 2; expected version 1 instead`.

/// What the message says: the tensor's shape (empty when not given), the node it names (empty
/// for a tensor no node made: an input or a leaf that autograd saved), the version it is at
/// and the version backward expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InplaceError {
    pub shape: Vec<i64>,
    pub node: String,
    pub at: u64,
    pub expected: u64,
}

/// Parses the message, or None when it is not the in-place version error.
pub fn parse_inplace_error(msg: &str) -> Option<InplaceError> {
    let shape = msg
        .split("Tensor [")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .map(|s| {
            s.split(',')
                .filter_map(|x| x.trim().parse::<i64>().ok())
                .collect::<Vec<_>>()
        });
    let node = msg.split("output 0 of ").nth(1).or_else(|| {
        msg.split("output ")
            .nth(1)
            .and_then(|r| r.split(" of ").nth(1))
    });
    let node: String = node
        .unwrap_or_default()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    let at: u64 = msg
        .split("is at version ")
        .nth(1)?
        .split(';')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let expected: u64 = msg
        .split("expected version ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(InplaceError {
        shape: shape.unwrap_or_default(),
        node,
        at,
        expected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_inplace_error() {
        let msg = "one of the variables needed for gradient computation has been modified by an inplace operation: [torch.FloatTensor [4, 8]], which is output 0 of ReluBackward0, is at version 2; expected version 1 instead. Hint: ...";
        assert_eq!(
            parse_inplace_error(msg),
            Some(InplaceError {
                shape: vec![4, 8],
                node: "ReluBackward0".into(),
                at: 2,
                expected: 1
            })
        );
        let short = "... [torch.FloatTensor [3]], which is output 1 of Add, is at version 3; expected version 2 instead";
        assert_eq!(parse_inplace_error(short).unwrap().node, "Add");
        assert_eq!(parse_inplace_error("something else"), None);
        // An input that autograd saved (no node made it).
        let input = "one of the variables needed for gradient computation has been modified by an inplace operation: [torch.FloatTensor [8, 6]] is at version 1; expected version 0 instead. Hint: ...";
        assert_eq!(
            parse_inplace_error(input),
            Some(InplaceError {
                shape: vec![8, 6],
                node: String::new(),
                at: 1,
                expected: 0
            })
        );
    }
}
