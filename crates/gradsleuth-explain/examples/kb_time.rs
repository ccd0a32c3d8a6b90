//! Times building the knowledge base and a first match:
//! `cargo run --release -p gradsleuth-explain --example kb_time`.
fn main() {
    let t = std::time::Instant::now();
    let kb = gradsleuth_explain::Kb::parse(gradsleuth_explain::SIGNATURES).unwrap();
    let built = t.elapsed();
    let t = std::time::Instant::now();
    let n = kb
        .matches(
            "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
            &[],
        )
        .len();
    println!("Kb::parse {built:?}, first match {:?} ({n})", t.elapsed());
}
