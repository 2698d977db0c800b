"""The reference TorchRec DLRM trainer, instrumented for ETT (knows only collector.reporter).

``python -m trainer`` is the supervisor; ``python -m trainer.train`` is one training process;
``python -m trainer.warmup`` the init-overlap compile warm-up; ``python -m trainer.publish``
the out-of-band publisher.
"""

import logging
import warnings

# Why here: this runs before any submodule imports torchrec or fbgemm, which warn at import and
# planning time about APIs this trainer uses on purpose (a directly built Topology, deprecated
# module paths, DDP flags set inside DMP). Dozens of such lines per rank would bury the
# progress lines; real errors still show.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"torchrec\.")
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"fbgemm_gpu\.")
for _noisy in ("torchrec.distributed.planner", "torch.fx._symbolic_trace"):
    logging.getLogger(_noisy).setLevel(logging.ERROR)
