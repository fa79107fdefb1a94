"""Multi-step tasks on a real-size project: `geo`, three modules of a few hundred lines each
(functions, classes, a private helper used all over) and a unittest suite to keep green.

The project is generated (the conversions from a table, the rest written out), so it is the
same every run and nobody's code is copied. Each kind of everyday request comes twice: a `dev`
task and a `check` task on another part of the project, the check phrasings written as a user
would put them, without looking at the loop's prompts or worked examples. Judged by running
the suite (and a few asserts) in a throwaway container, never by reading the code.
"""

from __future__ import annotations

from agent_tasks import Check, Judge, Task, all_of, answer_has, python_ok, src

# (name, what it converts, factor): each becomes a function of the same shape.
_CONVERSIONS = [
    ("km_to_miles", "kilometres to miles", 0.621371),
    ("miles_to_km", "miles to kilometres", 1.609344),
    ("m_to_feet", "metres to feet", 3.28084),
    ("feet_to_m", "feet to metres", 0.3048),
    ("kg_to_lb", "kilograms to pounds", 2.20462262),
    ("g_to_oz", "grams to ounces", 0.03527396),
    ("oz_to_g", "ounces to grams", 28.3495231),
    ("l_to_gal", "litres to US gallons", 0.26417205),
    ("gal_to_l", "US gallons to litres", 3.78541178),
    ("kmh_to_ms", "km/h to metres per second", 1 / 3.6),
    ("ms_to_kmh", "metres per second to km/h", 3.6),
    ("ha_to_acres", "hectares to acres", 2.47105381),
    ("acres_to_ha", "acres to hectares", 0.40468564),
    ("sqm_to_sqft", "square metres to square feet", 10.7639104),
    ("sqft_to_sqm", "square feet to square metres", 0.09290304),
    ("kwh_to_mj", "kilowatt-hours to megajoules", 3.6),
    ("mj_to_kwh", "megajoules to kilowatt-hours", 1 / 3.6),
    ("bar_to_psi", "bar to psi", 14.5037738),
    ("psi_to_bar", "psi to bar", 0.06894757),
    ("nm_to_km", "nautical miles to kilometres", 1.852),
    ("km_to_nm", "kilometres to nautical miles", 1 / 1.852),
    ("inch_to_cm", "inches to centimetres", 2.54),
    ("yd_to_m", "yards to metres", 0.9144),
    ("m_to_yd", "metres to yards", 1 / 0.9144),
    ("cal_to_j", "calories to joules", 4.184),
    ("j_to_cal", "joules to calories", 1 / 4.184),
    ("hp_to_kw", "horsepower to kilowatts", 0.74569987),
    ("kw_to_hp", "kilowatts to horsepower", 1.34102209),
]


def _convert_module() -> str:
    head = src('''
        """Unit conversions. Every function takes a number and returns it converted, rounded to
        six decimals; anything that is not a number raises TypeError."""

        import math


        def _check_number(value):
            """Raise TypeError unless value is a real, finite number (bool is not one)."""
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"expected a number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise TypeError("expected a finite number")
            return float(value)


        def c_to_f(value):
            """Convert degrees Celsius to degrees Fahrenheit."""
            return round(_check_number(value) * 9 / 5 + 32, 6)


        def f_to_c(value):
            """Convert degrees Fahrenheit to degrees Celsius."""
            return round((_check_number(value) - 32) * 5 / 9, 6)
        ''')
    body = "".join(
        f'\n\ndef {name}(value):\n    """Convert {what}."""\n'
        f"    return round(_check_number(value) * {factor!r}, 6)\n"
        for name, what, factor in _CONVERSIONS)
    return head + body


STATS = src('''
    """Small statistics on lists of numbers (no numpy needed)."""

    import math


    class EmptyDataError(ValueError):
        """Raised when a statistic needs at least one value and got none."""


    def _as_floats(values):
        """The values as a list of floats; EmptyDataError when there are none."""
        data = [float(v) for v in values]
        if not data:
            raise EmptyDataError("no values")
        return data


    def mean(values):
        """The arithmetic mean."""
        data = _as_floats(values)
        return sum(data) / len(data)


    def median(values):
        """The middle value (the mean of the two middle ones for an even count)."""
        data = sorted(_as_floats(values))
        middle = len(data) // 2
        if len(data) % 2:
            return data[middle]
        return (data[middle - 1] + data[middle]) / 2


    def mode(values):
        """The most common value (the smallest one on a tie)."""
        data = _as_floats(values)
        counts = {}
        for value in data:
            counts[value] = counts.get(value, 0) + 1
        best = max(counts.values())
        return min(value for value, count in counts.items() if count == best)


    def variance(values, sample=True):
        """The variance; the sample variance (n - 1) unless sample is False."""
        data = _as_floats(values)
        if sample and len(data) < 2:
            raise EmptyDataError("the sample variance needs two values")
        centre = mean(data)
        squares = sum((v - centre) ** 2 for v in data)
        return squares / (len(data) - 1 if sample else len(data))


    def stdev(values, sample=True):
        """The standard deviation (the square root of the variance)."""
        return math.sqrt(variance(values, sample))


    def value_range(values):
        """The largest value minus the smallest."""
        data = _as_floats(values)
        return max(data) - min(data)


    def clamp(value, low, high):
        """value, moved into [low, high]; ValueError when low > high."""
        if low > high:
            raise ValueError("low must not be above high")
        return max(low, min(value, high))


    def normalize(values):
        """The values scaled to [0, 1] (all 0.0 when they are all equal)."""
        data = _as_floats(values)
        low, high = min(data), max(data)
        if high == low:
            return [0.0 for _ in data]
        return [(v - low) / (high - low) for v in data]


    def percentile(values, p):
        """The p-th percentile (0 <= p <= 100), interpolating between ranks."""
        if not 0 <= p <= 100:
            raise ValueError("p must be between 0 and 100")
        data = sorted(_as_floats(values))
        rank = (len(data) - 1) * p / 100
        below = math.floor(rank)
        above = math.ceil(rank)
        if below == above:
            return data[int(rank)]
        return data[below] + (data[above] - data[below]) * (rank - below)


    def zscores(values):
        """How many standard deviations each value lies from the mean."""
        data = _as_floats(values)
        centre, spread = mean(data), stdev(data)
        if spread == 0:
            return [0.0 for _ in data]
        return [(v - centre) / spread for v in data]


    def moving_average(values, window):
        """The means of each run of `window` consecutive values."""
        data = _as_floats(values)
        if window < 1 or window > len(data):
            raise ValueError("window must be between 1 and the number of values")
        return [mean(data[i:i + window]) for i in range(len(data) - window + 1)]


    def histogram(values, bins):
        """Counts of the values in `bins` equal-width bins from the smallest to the largest."""
        data = _as_floats(values)
        if bins < 1:
            raise ValueError("bins must be at least 1")
        low, high = min(data), max(data)
        width = (high - low) / bins or 1.0
        counts = [0] * bins
        for value in data:
            index = min(int((value - low) / width), bins - 1)
            counts[index] += 1
        return counts


    class RunningStats:
        """Mean and variance of a stream of numbers, one value at a time (Welford)."""

        def __init__(self):
            self.count = 0
            self._mean = 0.0
            self._squares = 0.0

        def add(self, value):
            """Take one more value."""
            self.count += 1
            delta = value - self._mean
            self._mean += delta / self.count
            self._squares += delta * (value - self._mean)

        @property
        def mean(self):
            """The mean so far (EmptyDataError before the first value)."""
            if not self.count:
                raise EmptyDataError("no values yet")
            return self._mean

        @property
        def variance(self):
            """The sample variance so far (needs two values)."""
            if self.count < 2:
                raise EmptyDataError("the sample variance needs two values")
            return self._squares / (self.count - 1)
    ''')

SHAPES = src('''
    """Plane shapes: area, perimeter, scaling, and a few helpers over lists of shapes."""

    import math


    class Shape:
        """Base class: every shape has an area and a perimeter."""

        name = "shape"

        def area(self):
            raise NotImplementedError

        def perimeter(self):
            raise NotImplementedError

        def describe(self):
            """`circle: area 3.14, perimeter 6.28`."""
            return f"{self.name}: area {self.area():.2f}, perimeter {self.perimeter():.2f}"


    class Circle(Shape):
        """A circle of a given radius."""

        name = "circle"

        def __init__(self, radius):
            if radius <= 0:
                raise ValueError("the radius must be positive")
            self.radius = radius

        def area(self):
            return math.pi * self.radius ** 2

        def perimeter(self):
            return 2 * math.pi * self.radius

        def scale(self, factor):
            """A new circle, `factor` times as big across."""
            return Circle(self.radius * factor)

        def __repr__(self):
            return f"Circle({self.radius!r})"


    class Rectangle(Shape):
        """A rectangle of a given width and height."""

        name = "rectangle"

        def __init__(self, width, height):
            if width <= 0 or height <= 0:
                raise ValueError("the sides must be positive")
            self.width = width
            self.height = height

        def area(self):
            return self.width * self.height

        def perimeter(self):
            return 2 * (self.width + self.height)

        def scale(self, factor):
            """A new rectangle, `factor` times as big along both sides."""
            return Rectangle(self.width * factor, self.height * factor)

        def is_square(self):
            return self.width == self.height

        def __repr__(self):
            return f"Rectangle({self.width!r}, {self.height!r})"


    class Square(Rectangle):
        """A rectangle whose sides are equal."""

        name = "square"

        def __init__(self, side):
            super().__init__(side, side)

        def scale(self, factor):
            return Square(self.width * factor)

        def __repr__(self):
            return f"Square({self.width!r})"


    class Triangle(Shape):
        """A triangle given by its three sides; ValueError unless they can form one."""

        name = "triangle"

        def __init__(self, a, b, c):
            sides = sorted((a, b, c))
            if sides[0] <= 0:
                raise ValueError("the sides must be positive")
            if sides[0] + sides[1] <= sides[2]:
                raise ValueError("these sides do not form a triangle")
            self.a, self.b, self.c = a, b, c

        def perimeter(self):
            return self.a + self.b + self.c

        def area(self):
            s = self.perimeter() / 2  # Heron's formula
            return math.sqrt(s * (s - self.a) * (s - self.b) * (s - self.c))

        def scale(self, factor):
            return Triangle(self.a * factor, self.b * factor, self.c * factor)

        def is_right(self):
            a, b, c = sorted((self.a, self.b, self.c))
            return math.isclose(a * a + b * b, c * c)

        def __repr__(self):
            return f"Triangle({self.a!r}, {self.b!r}, {self.c!r})"


    def total_area(shapes):
        """The sum of the shapes' areas."""
        return sum(shape.area() for shape in shapes)


    def largest(shapes):
        """The shape with the largest area (None for no shapes)."""
        return max(shapes, key=lambda shape: shape.area(), default=None)


    def by_name(shapes):
        """The shapes grouped by their kind: {"circle": [...], ...}."""
        groups = {}
        for shape in shapes:
            groups.setdefault(shape.name, []).append(shape)
        return groups


    def parse(text):
        """A shape from text like `circle 2`, `rectangle 3 4`, `square 2`, `triangle 3 4 5`."""
        kind, *numbers = text.split()
        values = [float(n) for n in numbers]
        kinds = {"circle": Circle, "rectangle": Rectangle, "square": Square,
                 "triangle": Triangle}
        if kind not in kinds:
            raise ValueError(f"unknown shape {kind!r}")
        return kinds[kind](*values)
    ''')

TEST_CONVERT = src('''
    import unittest

    from geo import convert


    class ConvertTest(unittest.TestCase):
        def test_temperatures(self):
            self.assertEqual(convert.c_to_f(100), 212.0)
            self.assertEqual(convert.f_to_c(32), 0.0)

        def test_lengths(self):
            self.assertEqual(convert.km_to_miles(10), 6.21371)
            self.assertEqual(convert.feet_to_m(10), 3.048)
            self.assertEqual(convert.inch_to_cm(2), 5.08)

        def test_masses(self):
            self.assertEqual(convert.kg_to_lb(1), 2.204623)
            self.assertEqual(convert.oz_to_g(1), 28.349523)

        def test_round_trips(self):
            for there, back in [(convert.km_to_miles, convert.miles_to_km),
                                (convert.gal_to_l, convert.l_to_gal),
                                (convert.kw_to_hp, convert.hp_to_kw)]:
                self.assertAlmostEqual(back(there(42.0)), 42.0, places=4)

        def test_rejects_what_is_not_a_number(self):
            for bad in ["3", None, True, float("nan")]:
                with self.assertRaises(TypeError):
                    convert.km_to_miles(bad)


    if __name__ == "__main__":
        unittest.main()
    ''')

TEST_STATS = src('''
    import unittest

    from geo import stats


    class StatsTest(unittest.TestCase):
        def test_mean_and_median(self):
            self.assertEqual(stats.mean([1, 2, 3, 4]), 2.5)
            self.assertEqual(stats.median([3, 1, 2]), 2)
            self.assertEqual(stats.median([4, 1, 3, 2]), 2.5)

        def test_mode_prefers_the_smallest_on_a_tie(self):
            self.assertEqual(stats.mode([1, 2, 2, 3, 3]), 2)

        def test_variance_and_stdev(self):
            self.assertEqual(stats.variance([2, 4, 4, 4, 5, 5, 7, 9], sample=False), 4)
            self.assertEqual(stats.stdev([2, 4, 4, 4, 5, 5, 7, 9], sample=False), 2)

        def test_percentile_interpolates(self):
            self.assertEqual(stats.percentile([1, 2, 3, 4], 50), 2.5)
            self.assertEqual(stats.percentile([1, 2, 3, 4], 100), 4)

        def test_normalize_and_moving_average(self):
            self.assertEqual(stats.normalize([2, 4, 6]), [0.0, 0.5, 1.0])
            self.assertEqual(stats.moving_average([1, 2, 3, 4], 2), [1.5, 2.5, 3.5])

        def test_histogram(self):
            self.assertEqual(stats.histogram([1, 2, 2, 3, 9], 2), [4, 1])

        def test_empty_data_is_an_error(self):
            with self.assertRaises(stats.EmptyDataError):
                stats.mean([])

        def test_running_stats_match_the_batch_ones(self):
            running = stats.RunningStats()
            for value in [2, 4, 4, 4, 5, 5, 7, 9]:
                running.add(value)
            self.assertAlmostEqual(running.mean, 5.0)
            self.assertAlmostEqual(running.variance, stats.variance([2, 4, 4, 4, 5, 5, 7, 9]))


    if __name__ == "__main__":
        unittest.main()
    ''')

TEST_SHAPES = src('''
    import math
    import unittest

    from geo import shapes


    class ShapesTest(unittest.TestCase):
        def test_circle(self):
            circle = shapes.Circle(2)
            self.assertAlmostEqual(circle.area(), 4 * math.pi)
            self.assertAlmostEqual(circle.perimeter(), 4 * math.pi)

        def test_rectangle_and_square(self):
            self.assertEqual(shapes.Rectangle(3, 4).area(), 12)
            self.assertEqual(shapes.Rectangle(3, 4).perimeter(), 14)
            self.assertTrue(shapes.Square(2).is_square())

        def test_triangle(self):
            triangle = shapes.Triangle(3, 4, 5)
            self.assertEqual(triangle.area(), 6)
            self.assertTrue(triangle.is_right())

        def test_helpers(self):
            items = [shapes.Square(1), shapes.Rectangle(2, 3), shapes.Circle(1)]
            self.assertEqual(shapes.largest(items), items[1])
            self.assertEqual(sorted(shapes.by_name(items)), ["circle", "rectangle", "square"])
            self.assertEqual(repr(shapes.parse("triangle 3 4 5")), "Triangle(3.0, 4.0, 5.0)")

        def test_invalid_shapes(self):
            with self.assertRaises(ValueError):
                shapes.Circle(0)
            with self.assertRaises(ValueError):
                shapes.parse("hexagon 1")


    if __name__ == "__main__":
        unittest.main()
    ''')

GEO = {
    "geo/__init__.py": '"""Geometry, units and statistics helpers."""\n',
    "geo/convert.py": _convert_module(),
    "geo/stats.py": STATS,
    "geo/shapes.py": SHAPES,
    "tests/__init__.py": "",
    "tests/test_convert.py": TEST_CONVERT,
    "tests/test_stats.py": TEST_STATS,
    "tests/test_shapes.py": TEST_SHAPES,
    "README.md": src("""
        # geo

        Unit conversions (`geo/convert.py`), plane shapes (`geo/shapes.py`) and small
        statistics (`geo/stats.py`). Run the tests with `python3 -m unittest`.
        """),
}
SUITE_TESTS = 18
"""Tests in GEO's suite."""


def _planted(files: dict[str, str], path: str, old: str, new: str) -> dict[str, str]:
    """`files` with one change in `path` (the change must apply exactly once)."""
    assert files[path].count(old) == 1, (path, old)
    return {**files, path: files[path].replace(old, new)}


def suite_passes(at_least: int = SUITE_TESTS, unchanged: tuple[str, ...] = ()) -> Judge:
    """The whole unittest suite runs at least `at_least` tests and passes; the `unchanged`
    files are as generated (a fix must not edit the tests)."""
    code = f"""
        import re, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "unittest"], capture_output=True,
                              text=True, timeout=120)
        ran = re.search(r"Ran (\\d+) tests?", done.stderr)
        assert done.returncode == 0, done.stderr[-400:]
        assert ran and int(ran[1]) >= {at_least}, done.stderr[-400:]
        """

    def same(check: Check) -> str | None:
        for path in unchanged:
            if (check.root / path).read_text(errors="replace") != GEO[path]:
                return f"{path} was changed"
        return None

    return all_of(same, python_ok(code))


def has_no(name: str) -> Judge:
    """No Python file of the project mentions `name` any more."""

    def judge(check: Check) -> str | None:
        left = [str(p.relative_to(check.root)) for p in check.root.rglob("*.py")
                if ".sandbox-agent" not in p.parts and name in p.read_text(errors="replace")]
        return f"{name} still in {left}" if left else None

    return judge


def _test_added(path: str, mentions: str) -> Judge:
    """`path` has more test methods than before, one of the new ones mentioning `mentions`."""

    def judge(check: Check) -> str | None:
        text = (check.root / path).read_text(errors="replace")
        before = GEO[path].count("    def test_")
        if text.count("    def test_") <= before:
            return f"no new test in {path}"
        if text.count(mentions) <= GEO[path].count(mentions):
            return f"the new test does not use {mentions}"
        return None

    return judge


PROJECT_TASKS = [
    # -- add a function to a module
    Task(
        "geo-add-conversion", "edit", "dev",
        "Add a function cm_to_inch(value) to geo/convert.py, like the other conversions "
        "(1 inch is 2.54 cm). Keep everything else.",
        dict(GEO),
        all_of(python_ok("""
            from geo import convert
            assert convert.cm_to_inch(5.08) == 2.0, convert.cm_to_inch(5.08)
            """), suite_passes()),
    ),
    Task(
        "geo-add-pounds", "edit", "check",
        "geo/convert.py can't turn pounds into kilograms yet. Could you add lb_to_kg(value)? "
        "A pound is 0.45359237 kg. Same style as the existing ones please.",
        dict(GEO),
        all_of(python_ok("""
            from geo import convert
            assert abs(convert.lb_to_kg(10) - 4.535924) < 1e-6, convert.lb_to_kg(10)
            """), suite_passes()),
    ),
    # -- fix a planted bug so the tests pass
    Task(
        "geo-fix-median", "find-edit", "dev",
        "The tests in tests/test_stats.py fail. Fix the bug in geo/stats.py so that they pass.",
        _planted(GEO, "geo/stats.py", "return (data[middle - 1] + data[middle]) / 2",
                 "return (data[middle - 1] + data[middle + 1]) / 2"),
        suite_passes(unchanged=("tests/test_stats.py",)),
    ),
    Task(
        "geo-fix-perimeter", "find-edit", "check",
        "Something is off with rectangles: the perimeter comes out wrong. Track it down and "
        "correct it; the unit tests should all succeed afterwards.",
        _planted(GEO, "geo/shapes.py", "return 2 * (self.width + self.height)",
                 "return 2 * self.width + self.height"),
        suite_passes(unchanged=("tests/test_shapes.py",)),
    ),
    # -- add a test
    Task(
        "geo-test-clamp", "edit", "dev",
        "Add a unit test for stats.clamp to tests/test_stats.py.",
        dict(GEO),
        all_of(_test_added("tests/test_stats.py", "clamp"), suite_passes(SUITE_TESTS + 1)),
    ),
    Task(
        "geo-test-scale", "edit", "check",
        "I'd like a test making sure Circle.scale really multiplies the radius. Put it with "
        "the other shape tests.",
        dict(GEO),
        all_of(_test_added("tests/test_shapes.py", "scale"), suite_passes(SUITE_TESTS + 1)),
    ),
    # -- rename a helper and its callers
    Task(
        "geo-rename-check", "find-edit", "dev",
        "Rename the helper _check_number in geo/convert.py to _require_number, and update "
        "every place that uses it.",
        dict(GEO),
        all_of(has_no("_check_number"), python_ok("""
            from geo import convert
            assert callable(convert._require_number)
            """), suite_passes()),
    ),
    Task(
        "geo-rename-floats", "find-edit", "check",
        "_as_floats in the stats module is a poor name. Call it _to_float_list instead, "
        "everywhere.",
        dict(GEO),
        all_of(has_no("_as_floats"), python_ok("""
            from geo import stats
            assert stats._to_float_list([1]) == [1.0]
            """), suite_passes()),
    ),
    # -- answer a question about a function
    Task(
        "geo-answer-empty", "answer", "dev",
        "What does stats.mean do when it is given an empty list?",
        dict(GEO),
        answer_has(("EmptyDataError", "raises", "error")),
    ),
    Task(
        "geo-answer-triangle", "answer", "check",
        "If I build a Triangle with sides 1, 2 and 10, what happens?",
        dict(GEO),
        answer_has("ValueError"),
    ),
]
