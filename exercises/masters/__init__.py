"""The exercises' master notebooks, one module each: `cells` makes and marks a notebook's cells;
`01_gradient_rule`, `02_simplification_rule`, `03_cse_pass`, `04_fusion_grouping`,
`05_predict_retraces`, `06_predict_placement`, `07_run_a_saved_graph`, `08_predict_the_peak`,
`09_jvp_and_batching_rules`, `10_loops_as_nodes`, `11_a_module_of_your_own` and
`12_bucket_and_average_gradients` each build the notebook of their name (``cells()``), which
``exercises/build.py`` writes.
"""
