"""What lasts on disk and what leaves it: the store's layout, locks, allowed folders and fault
points (store), checkpoints written atomically and read back (checkpoints), whether their weights
can be trusted (health), HF GPT-2 in and out (interop), what a browser's upload may unpack
(uploads), SmolLM2 from its package (smollm2), CSV/JSON downloads (exports) and the offline HTML
report (report). May import the ground floor, lab.modeling and lab.inputs.
"""
