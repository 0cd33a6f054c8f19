"""specdeck's training tool: a Llama target and an EAGLE-3 drafter in plain PyTorch.

The math follows docs/research/eagle3_spec.md section 2 so that what is trained here is
what specdeck's engine runs: SGLang's aux-layer capture (config id i -> input of layer
i+1), the one-token shift between hiddens and tokens, SGLang's draft positions, d2t
offsets, the drafter's own RMSNorm eps and rope theta.
"""
