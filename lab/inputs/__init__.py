"""What a model reads: the caption corpus, batching and packing, token scores (data), the
tokenizers a new model can have and the one a checkpoint carries (tokenizers), and the task
contract every task plugin fills (tasks). May import the ground floor and lab.modeling.
"""
