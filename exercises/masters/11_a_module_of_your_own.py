"""Exercise 11, a module of your own: the cells of ``11_a_module_of_your_own.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 11 — A module of your own, trained

        Lesson 5 spoke PyTorch's vocabulary on teachflow's machinery: a **module** is an
        object that holds parameters and computes in `forward`; its parameters are found by
        looking at its attributes, and named by their path of attribute names; a **state
        dict** maps those names to arrays, which is all it takes to save a model and load it
        into another; an **optimizer** is arithmetic on `.grad`; and a training step, staged,
        is one graph.

        Here you predict a state dict's names and shapes, write a module of your own, and
        train it on the digits until it recognises nine in ten it has never seen.
        """),
        md(CHECKING.format(name="11_a_module_of_your_own")),
        setup("""
        from teachflow import nn

        F = nn.functional
        """),
        md("""
        ## 1. What is in a state dict?

        Read the model below. `Block` is a module of someone else's, with a few habits worth
        a second look: a `LayerNorm` (it has a weight and a bias, each one number per
        feature), a parameter of its own, and a layer kept in a plain Python list.
        """),
        given("the_model", """
        class Block(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.norm = nn.LayerNorm(width)
                self.proj = nn.Linear(width, width)
                self.gain = nn.Parameter(tfl.ones(width))
                self.spare = [nn.Linear(width, width)]     # a plain list

            def forward(self, x):
                return x + self.gain * self.proj(self.norm(x)).relu()


        def the_model():
            \"\"\"A fresh copy of the model of part 1.\"\"\"
            return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Block(16), nn.Dropout(0.1),
                                 nn.Linear(16, 3))
        """),
        md("""
        Predict `the_model().state_dict()`: a dict from each parameter's name to its shape, as
        a tuple (`()` for a scalar). The order does not matter. Mind which way round a
        `Linear`'s weight is: lesson 5 says it is PyTorch's.
        """),
        solution("state_prediction", """
        ### BEGIN SOLUTION
        predicted_state = {
            "0.weight": (16, 8), "0.bias": (16,),
            "2.norm.weight": (16,), "2.norm.bias": (16,),
            "2.proj.weight": (16, 16), "2.proj.bias": (16,), "2.gain": (16,),
            "4.weight": (3, 16), "4.bias": (3,),
        }
        ### END SOLUTION
        """),
        tests("test_state_prediction", 2, """
        def test_the_prediction_is_names_and_shapes():
            assert all(isinstance(name, str) and isinstance(shape, tuple)
                       for name, shape in predicted_state.items())
            assert predicted_state["0.bias"] == (16,)
        ### BEGIN HIDDEN TESTS


        def test_the_names():
            assert sorted(predicted_state) == sorted(the_model().state_dict())


        def test_the_shapes():
            assert {name: tuple(p.shape) for name, p in the_model().state_dict().items()} == {
                name: tuple(shape) for name, shape in predicted_state.items()}
        ### END HIDDEN TESTS
        """),
        free("""
        for name, p in the_model().state_dict().items():
            print(f"{name:14} {p.shape}")
        """),
        md("""
        The list is PyTorch's classic trap: a module finds its sub-modules among its
        attributes, not inside a list, so the spare layer's parameters are in no state dict
        and no optimizer ever sees them (PyTorch's answer is `nn.ModuleList`).

        ## 2. A module of your own

        Write `Classifier(n_in, hidden, n_out)`, an MLP with one hidden layer and a learned
        gain on each hidden unit:

        - `self.hidden`, a `Linear(n_in, hidden)`; `self.out`, a `Linear(hidden, n_out)`;
        - `self.gain`, a parameter of shape `(hidden,)` that starts at ones;
        - `forward(x) = out(relu(hidden(x)) * gain)`.

        The names matter: they are the state dict's, which another program loads by name.
        """),
        solution("classifier", """
        class Classifier(nn.Module):
            \"\"\"An MLP with one hidden layer, each hidden unit scaled by a learned gain.\"\"\"

            def __init__(self, n_in, hidden, n_out):
                super().__init__()
                ### BEGIN SOLUTION
                self.hidden = nn.Linear(n_in, hidden)
                self.out = nn.Linear(hidden, n_out)
                self.gain = nn.Parameter(tfl.ones(hidden))
                ### END SOLUTION

            def forward(self, x):
                ### BEGIN SOLUTION
                return self.out(self.hidden(x).relu() * self.gain)
                ### END SOLUTION
        """),
        md("""
        The tests meet your class through the helpers below, which speak in arrays: a state
        dict goes in or comes out as a dict of NumPy arrays.
        """),
        given("classifier_helpers", """
        def fresh_state(n_in, hidden, n_out):
            \"\"\"A fresh Classifier's state dict, as arrays.\"\"\"
            return {name: p.numpy() for name, p in Classifier(n_in, hidden, n_out)
                    .state_dict().items()}


        def forward_with(state, x):
            \"\"\"A Classifier with the parameters `state` loaded (their shapes give its sizes),
            applied to `x`.\"\"\"
            hidden, n_in = state["hidden.weight"].shape
            model = Classifier(n_in, hidden, state["out.weight"].shape[0])
            model.load_state_dict({name: tfl.tensor(a) for name, a in state.items()})
            return model(tfl.tensor(x))
        """),
        tests("test_classifier", 2, """
        def by_hand(state, x):
            h = np.maximum(x @ state["hidden.weight"].T + state["hidden.bias"], 0)
            return (h * state["gain"]) @ state["out.weight"].T + state["out.bias"]


        def test_the_classifier_s_parameters():
            state = fresh_state(5, 7, 3)
            assert {name: a.shape for name, a in state.items()} == {
                "hidden.weight": (7, 5), "hidden.bias": (7,), "out.weight": (3, 7),
                "out.bias": (3,), "gain": (7,)}
            np.testing.assert_array_equal(state["gain"], np.ones(7))
        ### BEGIN HIDDEN TESTS


        def test_the_classifier_computes_its_formula():
            rng = np.random.default_rng(11)
            state = {"hidden.weight": rng.normal(size=(6, 4)), "hidden.bias": rng.normal(size=6),
                     "out.weight": rng.normal(size=(2, 6)), "out.bias": rng.normal(size=2),
                     "gain": rng.normal(size=6)}
            state = {name: a.astype(np.float32) for name, a in state.items()}
            x = rng.normal(size=(5, 4)).astype(np.float32)
            np.testing.assert_allclose(np.asarray(forward_with(state, x)), by_hand(state, x),
                                       rtol=1e-5, atol=1e-5)


        def test_the_classifier_starts_as_a_linear_layer_does():
            state = fresh_state(64, 32, 10)
            assert np.abs(state["hidden.weight"]).max() <= 1 / np.sqrt(64)
            assert np.abs(state["out.weight"]).max() <= 1 / np.sqrt(32)
            assert state["hidden.weight"].std() > 0.5 / np.sqrt(64) / np.sqrt(3)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 3. Train it

        Write `train_digits()`: train a `Classifier(64, 64, 10)` on the digits
        (`tfl.data.load_digits()`, as lesson 5 does: batches from a `tfl.data.DataLoader`, an
        optimizer from `tfl.optim`, `F.cross_entropy`; stage the step with `tfl.function` if
        you like, it is quicker), and return a dict:

        - `"accuracy"`: the fraction of the *test* digits it classifies right, at least 0.9;
        - `"state"`: its state dict, as NumPy arrays (`p.numpy()`).

        Grading checks your claim: it computes the accuracy of the state you return itself,
        by NumPy alone. Keep it short: a few epochs are enough, and a test has a time limit.
        """),
        solution("train_digits", """
        def train_digits():
            \"\"\"Train a Classifier(64, 64, 10) on the digits: its test accuracy and state.\"\"\"
            ### BEGIN SOLUTION
            tfl.manual_seed(0)
            x_train, y_train, x_test, y_test = tfl.data.load_digits()
            model = Classifier(64, 64, 10)
            opt = tfl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

            @tfl.function
            def step(x, y):
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                return loss

            for _ in range(8):
                for xb, yb in tfl.data.DataLoader(x_train, y_train, batch_size=64, shuffle=True,
                                                  drop_last=True):
                    step(xb, yb)
            predicted = model(x_test).numpy().argmax(axis=1)
            return {"accuracy": float((predicted == y_test.numpy()).mean()),
                    "state": {name: p.numpy() for name, p in model.state_dict().items()}}
            ### END SOLUTION
        """),
        free("""
        result = train_digits()
        print(f"test accuracy {result['accuracy']:.1%}")
        """),
        tests("test_train_digits", 3, """
        def test_train_digits_reaches_nine_in_ten():
            result = train_digits()
            assert result["accuracy"] >= 0.9, result["accuracy"]
        ### BEGIN HIDDEN TESTS


        def test_the_state_returned_has_the_accuracy_claimed():
            result = train_digits()
            state = {name: np.asarray(a, dtype=np.float64) for name, a in result["state"].items()}
            assert sorted(state) == ["gain", "hidden.bias", "hidden.weight", "out.bias",
                                     "out.weight"]
            assert state["hidden.weight"].shape == (64, 64) and state["out.weight"].shape == (
                10, 64)
            _, _, x_test, y_test = tfl.data.load_digits()
            h = np.maximum(x_test.numpy() @ state["hidden.weight"].T + state["hidden.bias"], 0)
            logits = (h * state["gain"]) @ state["out.weight"].T + state["out.bias"]
            accuracy = float((logits.argmax(axis=1) == y_test.numpy()).mean())
            assert accuracy >= 0.9, accuracy
            assert abs(accuracy - result["accuracy"]) <= 0.01, (accuracy, result["accuracy"])


        def test_a_model_loaded_from_the_state_predicts_the_same():
            state = train_digits()["state"]
            _, _, x_test, _ = tfl.data.load_digits()
            x = x_test.numpy()[:50]
            again = forward_with(state, x)
            h = np.maximum(x @ state["hidden.weight"].T + state["hidden.bias"], 0)
            logits = (h * state["gain"]) @ state["out.weight"].T + state["out.bias"]
            np.testing.assert_allclose(np.asarray(again), logits, rtol=1e-4, atol=1e-4)
        ### END HIDDEN TESTS
        """),
        md("""
        A state dict is all of a model that another program needs, if it has the class: save
        one with `np.savez(path, **result["state"])` and load it into a fresh `Classifier`.
        Lesson 7 goes one step further and saves the *computation* too, as a graph that runs
        without your Python.
        """),
    ]
