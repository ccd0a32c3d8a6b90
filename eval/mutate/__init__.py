"""The mutation corpus: real third-party models and loops, one injected bug per mutant, an oracle
independent of gradsleuth, and the score of `gradsleuth run` and `gradsleuth lint` per operator."""
