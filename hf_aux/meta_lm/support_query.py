"""The support and query batches of the meta-learned LM objective (Shen, §4.1; eqs. 2-3): one task per meta step,
kept for several steps, with its state for checkpoints."""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import pad_sequence

from ..runtime.tensor_ops import to_device_nonblocking
from ..tasks.batches import host_side
from ..tasks.streaming import StreamBatches, is_stream


class SupportQuerySampler:
    """Support and query batches (Shen, §4.1; eqs. 2-3), both from ONE task: the MLM task on unlabelled text with
    probability `mlm_task_probability`, else a labelled task drawn uniformly, kept for `samples_per_task` examples
    in a row. Rows are drawn with replacement. A labelled row's target is its label token `[LABEL_k]` at every
    position; an unlabelled row is masked by `mlm_example(input_ids, attention_mask, generator) -> (x_m, y_m)`.

    labelled: {task: ([input_ids row, ...] with the task token at position 0, labels [N])}; unlabelled: a dataset
    with `input_ids`. The caller owns and checkpoints `generator`; `state_dict()` holds the rest (the current task,
    the steps left). Task and row draws are read on the host: on an accelerator they come from a CPU generator of
    this sampler's own (seeded from `generator`'s, in `state_dict()`), since reading a device generator's draw
    stops the host until the device catches up.

    A streamed `unlabelled` (`hf_aux.tasks.streaming.ResumableStream`, `--streaming`) has no random access: the MLM
    task's rows are the next blocks of a pass of its own over the corpus (`StreamBatches`, from the start, in
    order, pass after pass), whose position `state_dict()` holds too."""

    def __init__(self, labelled: dict, unlabelled, batch_size: int, samples_per_task: int,
                 mlm_task_probability: float, label_tokens: list[int], pad_token_id: int, mlm_example,
                 generator: torch.Generator, device: torch.device | str):
        self.labelled, self.unlabelled, self.batch_size = labelled, unlabelled, batch_size
        self.task_names = list(labelled)
        self.steps_per_task = samples_per_task // batch_size
        self.mlm_task_probability = mlm_task_probability
        self.label_tokens, self.pad_token_id, self.mlm_example = label_tokens, pad_token_id, mlm_example
        self.generator, self.device = generator, device
        self.host_generator = (generator if generator.device.type == "cpu"
                               else torch.Generator().manual_seed(generator.initial_seed()))
        self.current_task: str | None = None
        self.task_steps_left = 0
        self._stream = None  # a streamed `unlabelled`: its MLM rows in order (StreamBatches)
        if is_stream(unlabelled):
            self._stream = StreamBatches(unlabelled.source, batch_size, lambda rows, generator: rows, seed=0)

    def next_task(self) -> str:
        """The task of this meta step: a new draw once the current one had its `samples_per_task` examples."""
        if self.task_steps_left == 0:
            with host_side():  # a CPU generator's draws (class docstring)
                draw = torch.rand((), generator=self.host_generator).item()
                if draw < self.mlm_task_probability or not self.task_names:
                    self.current_task = "mlm"
                else:
                    index = torch.randint(len(self.task_names), (), generator=self.host_generator).item()
                    self.current_task = self.task_names[index]
            self.task_steps_left = self.steps_per_task
        self.task_steps_left -= 1
        return self.current_task

    def support_and_query(self) -> tuple[dict, dict]:
        """One meta step's support and query batches ({input_ids, attention_mask, labels}), of one task."""
        task = self.next_task()
        return self.batch(task), self.batch(task)

    def batch(self, task: str) -> dict[str, torch.Tensor]:
        if task == "mlm":
            if self._stream is not None:
                rows = self._stream.next()
            else:
                with host_side():  # a CPU generator's draws (class docstring)
                    drawn = torch.randint(len(self.unlabelled), (self.batch_size,), generator=self.host_generator)
                    rows = [self.unlabelled[i] for i in drawn.tolist()]
            ids, mask = self._to_device(*self._pad([torch.tensor(row["input_ids"]) for row in rows]))
            x, y = self.mlm_example(ids, mask, self.generator)
            return {"input_ids": x, "attention_mask": mask, "labels": y}
        examples, labels = self.labelled[task]
        with host_side():  # a CPU generator's draws; `labels` are host tensors (class docstring)
            index = torch.randint(len(examples), (self.batch_size,), generator=self.host_generator).tolist()
            tokens = torch.tensor(self.label_tokens)[labels[index].cpu()]
        ids, mask = self._pad([examples[i] for i in index])
        y = tokens[:, None].expand_as(ids).masked_fill(mask == 0, -100)
        ids, mask, y = self._to_device(ids, mask, y)
        return {"input_ids": ids, "attention_mask": mask, "labels": y}

    def _pad(self, rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token-id rows right-padded into ids [N, L] and their attention mask [N, L], both int64."""
        return (pad_sequence(rows, batch_first=True, padding_value=self.pad_token_id).long(),
                pad_sequence([torch.ones(len(row), dtype=torch.long) for row in rows], batch_first=True))

    def _to_device(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Same-shape host tensors on the device in one asynchronous copy from pinned memory (each copy from
        pageable memory stops the host on CUDA: a labelled batch made four of them)."""
        return tuple(to_device_nonblocking(torch.stack(tensors), self.device).unbind(0))

    def state_dict(self) -> dict:
        state = {"current_task": self.current_task, "task_steps_left": self.task_steps_left}
        if self.host_generator is not self.generator:
            state["host_generator"] = self.host_generator.get_state()
        if self._stream is not None:
            state["unlabelled_stream"] = self._stream.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.current_task, self.task_steps_left = state["current_task"], state["task_steps_left"]
        if self.host_generator is not self.generator and "host_generator" in state:
            self.host_generator.set_state(state["host_generator"])  # (a checkpoint from before it: a fresh seed)
        if self._stream is not None:
            if "unlabelled_stream" not in state:
                raise ValueError("resume_from_checkpoint: the checkpoint holds no position of the streamed MLM "
                                 "support/query batches (it was not written by a --streaming run); resume without "
                                 "--streaming")
            self._stream.load_state_dict(state["unlabelled_stream"])
