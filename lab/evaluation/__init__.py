"""How a model is judged and looked into: perplexity, BLEU and intervals (metrics),
evaluation of checkpoints on seeded subsets, live (evaluate), exposure bias (exposure), and
attention capture with its bertviz and Plotly views (attention_maps). May import the ground floor,
lab.modeling, lab.inputs and lab.storage; never lab.training or what is above it.
"""
