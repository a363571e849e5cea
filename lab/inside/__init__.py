"""Inside the model: the logit lens, head ablation and activation patching, on any model whose
family provides the named points (lab.modeling.points). `hooks` reads and replaces activations;
`lens`, `ablation` and `patching` are the three tools; each returns plain dicts the CLI prints as
JSON and the browser draws."""
