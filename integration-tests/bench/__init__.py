"""kmpc's benchmarks (make bench, bench-*): the login storm against stock krb5
and kmpc (storm_bench), soaks (storm_soak), replicas (replica_bench),
kpasswd (kpasswd_bench), the KDC's CPU A/B (kdc_cpu_ab), the netns LAN
(netns_bench), the MPC micro-benchmark (bench-mpc.sh) and the results table
(bench_results).  They run on the harness in kmpc_harness/."""
