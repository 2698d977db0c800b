"""``--device``: flag validation and the hybrid placement's pieces, checked without a GPU.

Why no GPU and no faked CUDA: the GPU path is exercised for real by ``bench/gpu_lifecycle.sh``
on a borrowed GPU machine. Here each piece that can be wrong on any machine is checked for
real: the flag's resolution against what this machine has, the placement of the dense arches
(on the CPU, and on the meta device: a genuine non-CPU device, so a missed module or buffer or
a hook that routes to the wrong place shows), the batch placement, the inductor options that
the CUDA profiles pass (validated by this torch's ``torch.compile``), and the DDP wrapper of
the GPU path, which trains a sharded model on the CPU exactly as TorchRec's default does.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from trainer import launch
from trainer.config import parse_train_config
from trainer.data import SyntheticClicks
from trainer.loop import on_device
from trainer.model import (
    DenseDeviceDataParallel,
    ModelShape,
    attach_sparse_optimizer,
    build_optimizer,
    build_unsharded,
    dense_arches,
    dense_device_of,
    place_dense,
    plan_sharding,
    shard,
)
from trainer.pt2 import inductor_options, known_inductor_options
from trainer.startup import dense_device

SHAPE = ModelShape(embedding_rows=200, embedding_dim=8, dense_features=13, sparse_features=4)
HAS_CUDA = torch.cuda.is_available()


def test_device_defaults_to_cpu_and_is_forwarded_to_the_child() -> None:
    cfg = parse_train_config([])
    assert cfg.device == "cpu" and not cfg.on_cuda
    argv = cfg.to_argv()
    assert argv[argv.index("--device") + 1] == "cpu"
    assert parse_train_config(argv) == cfg
    assert dense_device(cfg) == torch.device("cpu")


def test_auto_resolves_to_what_this_machine_has() -> None:
    """``auto`` is resolved once, in the parent, so the child is told a concrete device."""
    cfg = parse_train_config(["--device", "auto"])
    assert cfg.device == ("cuda" if HAS_CUDA else "cpu")
    argv = cfg.to_argv()
    assert argv[argv.index("--device") + 1] == cfg.device


def test_cuda_without_a_gpu_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    if HAS_CUDA:  # on a GPU machine the same flag must be accepted as is
        assert parse_train_config(["--device", "cuda"]).device == "cuda"
        return
    with pytest.raises(SystemExit) as exit_info:
        parse_train_config(["--device", "cuda"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--device cuda: no CUDA device is available here" in err, err


def test_supervisor_refuses_cuda_without_a_gpu_before_starting(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        launch.parse(["--device", "cuda", "--nproc-per-node", str(torch.cuda.device_count() + 1)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m trainer: error: --"), err


def test_unknown_device_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_train_config(["--device", "tpu"])
    assert "argument --device: invalid choice: 'tpu'" in capsys.readouterr().err


def test_dense_arches_go_where_asked_and_tables_stay_unallocated() -> None:
    model = build_unsharded(SHAPE, 3, torch.device("cpu"))
    dlrm = model.model
    assert dense_device_of(model) == torch.device("cpu")
    for arch in dense_arches(dlrm):
        assert {t.device.type for t in [*arch.parameters(), *arch.buffers()]} == {"cpu"}
    tables = list(dlrm.sparse_arch.parameters())
    assert tables and {t.device.type for t in tables} == {"meta"}  # DMP allocates the shards
    assert not dlrm.sparse_arch._forward_hooks  # the CPU model is exactly as it always was
    default = build_unsharded(SHAPE, 3)
    for (name, value), (other, expected) in zip(model.state_dict().items(),
                                                default.state_dict().items(), strict=True):
        assert name == other
        if value.device.type == "cpu":
            assert torch.equal(value, expected), name


def test_place_dense_moves_every_dense_tensor_and_routes_pooled_embeddings() -> None:
    """On a non-CPU device (meta here, a GPU in production) the dense arches, including the
    interaction's index buffer, move; the pooled embeddings are routed to that device; state
    dict names do not change, so checkpoints and plans are the same on either device."""
    model = build_unsharded(SHAPE, 0)
    names = list(model.state_dict())
    dlrm = model.model
    place_dense(dlrm, torch.device("meta"))
    assert dense_device_of(model) == torch.device("meta")
    moved = [t for arch in dense_arches(dlrm) for t in [*arch.parameters(), *arch.buffers()]]
    assert moved and {t.device.type for t in moved} == {"meta"}
    assert list(model.state_dict()) == names
    (hook,) = dlrm.sparse_arch._forward_hooks.values()
    pooled = torch.ones(2, SHAPE.sparse_features, SHAPE.embedding_dim, requires_grad=True)
    routed = hook(dlrm.sparse_arch, (), pooled)
    assert routed.device.type == "meta" and routed.shape == pooled.shape
    assert routed.requires_grad  # the copy is differentiable: gradients return to the tables


def test_batches_move_dense_features_and_labels_but_not_ids() -> None:
    batch = SyntheticClicks(0, 4, SHAPE.dense_features, SHAPE.sparse_features,
                            SHAPE.embedding_rows).batch(0)
    assert on_device(batch, torch.device("cpu")) is batch
    moved = on_device(batch, torch.device("meta"))
    assert moved.dense_features.device.type == "meta" and moved.labels.device.type == "meta"
    assert moved.dense_features.shape == batch.dense_features.shape
    assert moved.sparse_features is batch.sparse_features  # the tables are on the CPU


def test_cuda_inductor_options_are_valid_for_this_torch() -> None:
    """Every option of both CUDA profiles is known to this torch (none silently dropped) and
    accepted by ``torch.compile``; the pruned mode autotunes GEMMs only, within shared memory,
    and caches its choices."""
    baseline, pruned = inductor_options(False, "cuda"), inductor_options(True, "cuda")
    assert baseline == {"max_autotune": True, "max_autotune_gemm_backends": "ATEN,TRITON",
                        "max_autotune_gemm_search_space": "DEFAULT"}
    assert pruned["max_autotune_gemm"] is True and "max_autotune" not in pruned
    assert pruned["max_autotune_pointwise"] is False
    assert pruned["max_autotune_prune_choices_based_on_shared_mem"] is True
    assert pruned["autotune_local_cache"] is True
    for options in (baseline, pruned):
        assert known_inductor_options(options) == options
        torch.compile(torch.relu, options=options)  # validates option names and types
    assert known_inductor_options({"max_autotune": True, "no_such_knob": 1}) == {
        "max_autotune": True}
    with pytest.raises(RuntimeError, match="no_such_knob"):
        torch.compile(torch.relu, options={"no_such_knob": 1})  # why unknown ones are dropped
    assert inductor_options(False, "cpu") == {}  # the CPU profiles are unchanged
    assert inductor_options(True, "cpu") == {"max_autotune": True,
                                             "max_autotune_gemm_backends": "ATEN"}


def losses_of(world: dist.ProcessGroup, wrapper: DenseDeviceDataParallel | None) -> list[float]:
    model = build_unsharded(SHAPE, 5)
    attach_sparse_optimizer(model, 0.05)
    dmp = shard(model, world, plan_sharding(model, world, 16), wrapper=wrapper)
    ddp = dmp._dmp_wrapped_module
    assert isinstance(ddp, torch.nn.parallel.DistributedDataParallel)
    ignored = {name for name in ddp.parameters_to_ignore if ".sparse_arch." in f".{name}"}
    assert ignored  # the sharded tables are left to their fused optimizer, not to DDP
    optimizer = build_optimizer(dmp, 0.05)
    data = SyntheticClicks(5, 16, SHAPE.dense_features, SHAPE.sparse_features,
                           SHAPE.embedding_rows)
    losses = []
    for step in range(4):
        optimizer.zero_grad()
        loss, _ = dmp(data.batch(step))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def test_gpu_path_ddp_wrapper_trains_like_torchrecs_default(world: dist.ProcessGroup) -> None:
    """The wrapper the cuda path uses (it must not move the dense part to DMP's CPU device)
    gives the same DDP, hence the very same losses, as TorchRec's default on a CPU model."""
    default = losses_of(world, None)
    hybrid = losses_of(world, DenseDeviceDataParallel(init_sync=True))
    assert hybrid == default
    assert default[-1] != default[0]  # it trained: the optimizer steps changed the model
