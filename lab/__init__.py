"""tfmr-lab: train, compare and understand small Transformer language models.

The library in layers; each imports only those below it (tests/test_layers.py checks there is no
circle):
- the ground: errors, registry (the plugin registries), settings (a setting described once),
  plugin_settings (a plugin's own settings), overrides (`key=value` text), config (model,
  training and decoding configs), presets;
- modeling: a model and how it decodes;
- inputs: corpora, tokenizers, the task contract;
- storage: the store, checkpoints, HF interop, SmolLM2, exports and reports;
- training: the trainer and a run; evaluation: metrics, evaluation, attention views;
- worker: the job ledger, its worker and the steps after training;
- sweeps: many runs as one experiment;
- cli and ui: the terminal's and the browser's faces (Gradio only in ui).
"""
