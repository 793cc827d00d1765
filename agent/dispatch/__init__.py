"""Where a run's tasks run: here one after the other, in parallel over a fleet of servers and their slots, or on
the nodes of a Ray cluster; each dispatcher runs the run's own task pipeline and yields each task's outcome.

- fleet.py: tasks in parallel, one thread per seat of the fleet;
- seats.py: the fleet's servers and slots: which seat a task gets, failover when a server dies;
- ray_head.py: `--executor ray`: each task a Ray task on a labelled node, its branch and records brought back.
"""
