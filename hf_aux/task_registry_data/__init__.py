"""Data of the task registry (`hf_aux.tasks.registry`): tasksource's task annotations converted into TaskSpec fields
(tasksource.json) and tasksource's licence notice. A package only so that the wheel declares it; no code."""
