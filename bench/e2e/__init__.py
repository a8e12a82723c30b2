"""End-to-end benchmark harness behind ``bench/run.py``: services, workloads, systems, anchors.

Modules, in the order a run uses them:

* ``services``   throwaway PostgreSQL 15 and a Tansu broker (``pgbridge.embedded``);
* ``workloads``  the tables and the SQL that generates each workload while a system streams;
* ``procstat``   CPU seconds and peak RSS of one process, from ``/proc``;
* ``tail``       a consumer that follows the output topic live and samples record timestamps;
* ``systems``    pgbridge (``python -m pgbridge run`` as a child process) and Debezium;
* ``anchors``    the physical limits: ``pg_recvlogical`` and a raw confluent-kafka producer;
* ``report``     the results table and its JSON.

Nothing here is imported by the product.
"""
