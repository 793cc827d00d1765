"""Where a run's tasks run: here one after the other, in parallel over a fleet of servers and their slots, or on
the nodes of a Ray cluster; each dispatcher runs the run's own task pipeline and yields each task's outcome.

- in_order.py: the default: here, one task after the other, on the run's own model and server;
- local.py: which of the two this machine uses: the fleet when there are several servers or --parallel;
- fleet.py: tasks in parallel, one thread per seat of the fleet;
- seats.py: the fleet's servers and slots: which seat a task gets, failover when a server dies;
- ray_head.py: `--executor ray`, the head's side: the bundle out, one Ray task per task, branches and records back;
- ray_worker.py: `--executor ray`, a worker node's side: the task through the run's own pipeline.
"""
