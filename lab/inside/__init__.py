"""Inside the model: the logit lens, head ablation and activation patching, on any model whose
family provides the named points (lab.modeling.points). `hooks` reads and replaces activations;
`lens`, `ablation` and `patching` are the three tools, `figures` draws them; each returns plain
dicts the CLI prints as JSON and the browser draws.

It may import the floors below it: modeling (the points, generation), inputs (the texts a task
scores), evaluation (the metrics, the view's tokenization) and the ground; never the worker,
sweeps, cli or ui, which import it."""
