"""Exercise 12, bucket and average gradients: the cells of
``12_bucket_and_average_gradients.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 12 — Bucket the all-reduces, and average the gradients by hand

        Data parallelism (lesson 10) runs one training step in N processes, each on its share
        of the batch, and makes their gradients equal with an **all-reduce** before the
        optimizer steps. Two ideas carry it: an all-reduce costs a round trip however few
        bytes it carries, so small ones are merged into **buckets**; and the mean of the
        shares' gradients *is* the whole batch's gradient, so N processes take the step one
        process would take.

        You write both: the bucketing rule of the pass `bucket_all_reduce`, checked against
        the pass on lesson 10's training step, and the gradient of a batch cut into shares,
        ranks simulated by hand in one process. Nothing here starts a process: the graphs are
        traced in a *world of one* (`tfl.distributed.init(world_size=1)`, where the
        all-reduce of one array is the array).
        """),
        md(CHECKING.format(name="12_bucket_and_average_gradients")),
        setup("""
        from teachflow.passes.bucket_all_reduce import buckets

        F = tfl.nn.functional
        """),
        md("""
        ## 1. Lesson 10's step, and its all-reduces

        `traced_step(bucket_mb)` builds lesson 10's replicated training step (an MLP
        64 → 128 → 64 → 10 in float32, wrapped in `DistributedDataParallel` with buckets of
        `bucket_mb` megabytes) and compiles it on a batch of 64 digits, in a world of one
        that it joins and leaves (once for each `bucket_mb`: it remembers what it compiled).
        Its traced graph holds one `all_reduce` per gradient, in the order backward makes them
        (the last layer's first); after the pass `bucket_all_reduce`, one per bucket.
        """),
        given("traced_step", """
        from functools import cache


        @cache  # (each bucket size compiled once)
        def traced_step(bucket_mb):
            \"\"\"Lesson 10's DDP training step with buckets of `bucket_mb` MB, compiled.\"\"\"
            joined = tfl.distributed.is_initialized()
            if not joined:
                tfl.distributed.init(world_size=1)  # a world of one: no process starts
            try:
                tfl.manual_seed(0)
                model = tfl.nn.Sequential(tfl.nn.Linear(64, 128), tfl.nn.ReLU(),
                                          tfl.nn.Linear(128, 64), tfl.nn.ReLU(),
                                          tfl.nn.Linear(64, 10))
                ddp = tfl.nn.parallel.DistributedDataParallel(model, bucket_mb=bucket_mb)
                opt = tfl.optim.SGD(ddp.parameters(), lr=0.1)

                def step(x, y):
                    opt.zero_grad()
                    loss = F.cross_entropy(ddp(x), y)
                    loss.backward()
                    opt.step()
                    return loss

                x, y, _, _ = tfl.data.load_digits()
                return tfl.compile(step, x[:64], y[:64])
            finally:
                if not joined:
                    tfl.distributed.shutdown()


        def gradient_bytes(bucket_mb=25):
            \"\"\"The bytes each all-reduce of the traced step carries, in the graph's order.\"\"\"
            graph = traced_step(bucket_mb).snapshots[0].graph
            return [int(np.prod(n.spec.shape)) * n.spec.dtype.itemsize
                    for n in graph.nodes if n.op.name == "all_reduce"]


        def pass_buckets(bucket_mb):
            \"\"\"The pass's buckets of the traced step, each as the positions of its gradients
            in `gradient_bytes`' list.\"\"\"
            graph = traced_step(bucket_mb).snapshots[0].graph
            position = {n: k for k, n in enumerate(n for n in graph.nodes
                                                    if n.op.name == "all_reduce")}
            return [[position[n] for n in bucket] for bucket in buckets(graph.nodes)]


        def all_reduces_left(bucket_mb):
            \"\"\"How many all_reduce nodes the compiled step has, after every pass.\"\"\"
            graph = traced_step(bucket_mb).snapshots[-1].graph
            return sum(node.op.name == "all_reduce" for node in graph.nodes)
        """),
        free("""
        print(gradient_bytes())
        """),
        md("""
        ## 2. The bucketing rule

        The pass walks the all-reduces in the order the gradients are made and fills one
        bucket at a time: a gradient joins the open bucket if the bucket's bytes with it stay
        within the limit (`bucket_mb * 2**20` bytes: a megabyte is 2**20 bytes here, as in
        PyTorch); otherwise the open bucket closes and a new one starts with it. A gradient
        larger than the limit is a bucket on its own. (The pass also closes a bucket early
        when something reads one of its results before it is full, and keeps apart gradients
        of other dtypes or devices; neither happens in this step.)

        Write `bucket(sizes, bucket_mb)`: given the bytes of each gradient in the order they
        are made, return the buckets, each a list of positions in `sizes`, in order.
        """),
        solution("bucket", """
        def bucket(sizes, bucket_mb):
            \"\"\"The positions of `sizes` (bytes, in order), grouped as the pass does.\"\"\"
            ### BEGIN SOLUTION
            limit = bucket_mb * 2**20
            result, held = [], 0
            for k, size in enumerate(sizes):
                if result and held + size <= limit:
                    result[-1].append(k)
                    held += size
                else:
                    result.append([k])
                    held = size
            return result
            ### END SOLUTION
        """),
        tests("test_bucket", 3, """
        def test_bucket_on_lesson_10_s_step():
            sizes = [40, 2560, 256, 32768, 512, 32768]
            assert bucket(sizes, 25) == [[0, 1, 2, 3, 4, 5]]
            assert bucket(sizes, 0.04) == [[0, 1, 2, 3, 4], [5]]
        ### BEGIN HIDDEN TESTS


        def test_bucket_agrees_with_the_pass():
            sizes = gradient_bytes()
            for mb in (0.01, 0.03, 0.001):
                assert bucket(sizes, mb) == pass_buckets(mb), mb


        def test_a_bucket_filled_exactly_stays_one():
            mb = 1 / 1024  # 1,024 bytes
            assert bucket([512, 512, 512], mb) == [[0, 1], [2]]
            assert bucket([1024, 1], mb) == [[0], [1]]


        def test_a_gradient_over_the_limit_is_a_bucket_alone():
            mb = 1 / 1024
            assert bucket([100, 5000, 100, 100], mb) == [[0], [1], [2, 3]]
            assert bucket([5000], mb) == [[0]]


        def test_no_gradients_no_buckets():
            assert bucket([], 25) == []
        ### END HIDDEN TESTS
        """),
        md("""
        ## 3. How many all-reduces are left?

        Predict how many `all_reduce` nodes the compiled step keeps for each of these bucket
        sizes (`predicted_all_reduces`, a dict from `bucket_mb` to a count). Your `bucket`
        may help; the pass decides.
        """),
        solution("all_reduce_prediction", """
        ### BEGIN SOLUTION
        predicted_all_reduces = {25: 1, 0.04: 2, 0.01: 4, 0.001: 6}
        ### END SOLUTION
        """),
        tests("test_all_reduce_prediction", 2, """
        def test_the_default_bucket_holds_them_all():
            assert sorted(predicted_all_reduces) == [0.001, 0.01, 0.04, 25]
            assert predicted_all_reduces[25] == all_reduces_left(25)
        ### BEGIN HIDDEN TESTS


        def test_the_counts():
            for mb in (0.04, 0.01, 0.001):
                assert predicted_all_reduces[mb] == all_reduces_left(mb), mb
        ### END HIDDEN TESTS
        """),
        free("""
        for mb in (25, 0.04, 0.01, 0.001):
            print(mb, "MB:", all_reduces_left(mb), "all-reduces;", pass_buckets(mb))
        """),
        md("""
        ## 4. N ranks, one step

        Now the arithmetic that makes it all right, with ranks simulated by hand. The model is
        linear, `x @ w`, and the loss of a batch is the **mean** squared error,
        `((x @ w - y) ** 2).mean()`. Rank `r` of a world of `world` ranks takes rows
        `np.array_split(np.arange(len(x)), world)[r]` of the batch (the first ranks take one
        row more when the batch does not divide).

        - `rank_gradient(x, y, w, rank, world)`: the gradient, with respect to `w`, of the
          mean squared error of *this rank's rows* (use `tfl.grad`, or work it out by hand);
        - `combine(gradients, counts)`: the whole batch's gradient, from each rank's gradient
          and its number of rows. When every rank has as many rows, this is the plain mean, an
          all-reduce with `reduction="mean"`, which is what `DistributedDataParallel` does;
          when they differ, the plain mean is wrong: think about what each rank's mean divides
          by.
        """),
        solution("rank_gradient", """
        def rank_gradient(x, y, w, rank, world):
            \"\"\"The gradient of rank `rank`'s mean squared error with respect to `w`.\"\"\"
            ### BEGIN SOLUTION
            rows = np.array_split(np.arange(len(x)), world)[rank]
            xs, ys = tfl.tensor(np.asarray(x)[rows]), tfl.tensor(np.asarray(y)[rows])
            return tfl.grad(lambda v: ((xs @ v - ys) ** 2).mean())(tfl.tensor(w))
            ### END SOLUTION


        def combine(gradients, counts):
            \"\"\"The whole batch's gradient, from each rank's gradient and row count.\"\"\"
            ### BEGIN SOLUTION
            total = sum(np.asarray(g) * n for g, n in zip(gradients, counts, strict=True))
            return total / sum(counts)
            ### END SOLUTION
        """),
        free("""
        rng = np.random.default_rng(0)
        x, y, w = rng.normal(size=(8, 3)), rng.normal(size=8), rng.normal(size=3)
        shares = [rank_gradient(x, y, w, r, 4) for r in range(4)]
        print(combine(shares, [2, 2, 2, 2]))
        print(tfl.grad(lambda v: ((tfl.tensor(x) @ v - tfl.tensor(y)) ** 2).mean())(tfl.tensor(w)))
        """),
        tests("test_ranks", 2, """
        def whole_batch_gradient(x, y, w):
            return np.asarray(tfl.grad(lambda v: ((tfl.tensor(x) @ v - tfl.tensor(y)) ** 2)
                                       .mean())(tfl.tensor(w)))


        def data_parallel_gradient(x, y, w, world):
            counts = [len(r) for r in np.array_split(np.arange(len(x)), world)]
            gradients = [np.asarray(rank_gradient(x, y, w, r, world)) for r in range(world)]
            return np.asarray(combine(gradients, counts))


        def test_four_equal_shares_give_the_whole_batch_s_gradient():
            rng = np.random.default_rng(1)
            x, y, w = rng.normal(size=(8, 3)), rng.normal(size=8), rng.normal(size=3)
            np.testing.assert_allclose(data_parallel_gradient(x, y, w, 4),
                                       whole_batch_gradient(x, y, w), rtol=1e-10)
        ### BEGIN HIDDEN TESTS


        def test_each_rank_takes_its_own_rows():
            rng = np.random.default_rng(2)
            x, y, w = rng.normal(size=(9, 2)), rng.normal(size=9), rng.normal(size=2)
            for r, rows in enumerate(np.array_split(np.arange(9), 3)):
                np.testing.assert_allclose(np.asarray(rank_gradient(x, y, w, r, 3)),
                                           whole_batch_gradient(x[rows], y[rows], w),
                                           rtol=1e-10)


        def test_unequal_shares_give_the_whole_batch_s_gradient():
            rng = np.random.default_rng(3)
            x, y, w = rng.normal(size=(10, 4)), rng.normal(size=10), rng.normal(size=4)
            for world in (1, 3, 4, 7):
                np.testing.assert_allclose(data_parallel_gradient(x, y, w, world),
                                           whole_batch_gradient(x, y, w), rtol=1e-10)
        ### END HIDDEN TESTS
        """),
        md("""
        This is why `DistributedDataParallel` wants every rank's share of a batch to be the
        same size (PyTorch's `DistributedSampler` pads the data set so that it divides), and
        why a loss summed rather than averaged would need an all-reduce of `sum` instead. The
        exchange costs the same either way: one all-reduce per bucket, which your `bucket`
        counted.
        """),
    ]
