"""Training: optimizers (`gr.optim`), mixed precision (`gr.amp`), the train loop with checkpoints (`gr.train`),
the memory of a training step, and data parallel over torch.distributed (`gr.distributed`).

Layer rule: imports the layers below (util, core, ops, passes, backends, viz, api, eager) and itself."""
