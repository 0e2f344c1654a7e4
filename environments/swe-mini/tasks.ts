/**
 * The swe-mini tasks: small Python repositories we wrote, each with a real-looking bug, the
 * issue a user would file, the fix, and the tests that prove it. `scripts/generate-swe-mini.ts`
 * turns these into SWE-bench rows (`data/example.jsonl`: gold patch and test patch as diffs,
 * FAIL_TO_PASS / PASS_TO_PASS, the base commit); `gym image build` bakes each repository, at its
 * base commit with no trace of the fix, into its own image.
 */
export interface SweMiniTask {
  id: string;
  repo: string;
  problemStatement: string;
  /** The repository at its base commit (path -> content). */
  files: Record<string, string>;
  /** Files the fix changes (path -> new content). */
  fix: Record<string, string>;
  /** The hidden test file the verifier adds (path -> content). */
  tests: Record<string, string>;
  failToPass: string[];
  passToPass: string[];
}

const pkg = (name: string) => ({ [`${name}/__init__.py`]: '' });

export const SWE_MINI_TASKS: SweMiniTask[] = [
  {
    id: 'textstats-1',
    repo: 'gym-examples/textstats',
    problemStatement:
      'word_count() counts empty strings as words when a sentence has several spaces in a row.\n\n`word_count("hello   world")` returns 4 instead of 2. Tabs and newlines should separate words too.',
    files: {
      ...pkg('textstats'),
      'textstats/core.py':
        'def word_count(text):\n    """Return the number of words in text."""\n    if not text:\n        return 0\n    return len(text.split(" "))\n\n\ndef char_count(text):\n    return len(text)\n',
      'tests/test_basic.py':
        'from textstats.core import char_count, word_count\n\n\ndef test_single_spaces():\n    assert word_count("a b c") == 3\n\n\ndef test_chars():\n    assert char_count("abc") == 3\n',
    },
    fix: {
      'textstats/core.py':
        'def word_count(text):\n    """Return the number of words in text."""\n    if not text:\n        return 0\n    return len(text.split())\n\n\ndef char_count(text):\n    return len(text)\n',
    },
    tests: {
      'tests/test_issue.py':
        'from textstats.core import word_count\n\n\ndef test_repeated_spaces():\n    assert word_count("hello   world") == 2\n\n\ndef test_tabs_and_newlines():\n    assert word_count("a\\tb\\nc") == 3\n',
    },
    failToPass: ['tests/test_issue.py::test_repeated_spaces', 'tests/test_issue.py::test_tabs_and_newlines'],
    passToPass: ['tests/test_basic.py::test_single_spaces', 'tests/test_basic.py::test_chars'],
  },
  {
    id: 'mathutil-1',
    repo: 'gym-examples/mathutil',
    problemStatement:
      'clamp(value, low, high) returns the wrong bound for values above the range: clamp(15, 0, 10) gives 0, it should give 10.',
    files: {
      ...pkg('mathutil'),
      'mathutil/bounds.py':
        'def clamp(value, low, high):\n    if value < low:\n        return low\n    if value > high:\n        return low\n    return value\n',
      'tests/test_basic.py':
        'from mathutil.bounds import clamp\n\n\ndef test_inside():\n    assert clamp(5, 0, 10) == 5\n\n\ndef test_below():\n    assert clamp(-3, 0, 10) == 0\n',
    },
    fix: {
      'mathutil/bounds.py':
        'def clamp(value, low, high):\n    if value < low:\n        return low\n    if value > high:\n        return high\n    return value\n',
    },
    tests: {
      'tests/test_issue.py':
        'from mathutil.bounds import clamp\n\n\ndef test_above():\n    assert clamp(15, 0, 10) == 10\n',
    },
    failToPass: ['tests/test_issue.py::test_above'],
    passToPass: ['tests/test_basic.py::test_inside', 'tests/test_basic.py::test_below'],
  },
  {
    id: 'slugify-1',
    repo: 'gym-examples/slugify',
    problemStatement:
      'slugify("Hello World") returns "Hello-World". Slugs are used in URLs and must be lower case: expected "hello-world".',
    files: {
      ...pkg('slugify'),
      'slugify/slug.py':
        'import re\n\n\ndef slugify(title):\n    words = re.findall(r"[A-Za-z0-9]+", title)\n    return "-".join(words)\n',
      'tests/test_basic.py':
        'from slugify.slug import slugify\n\n\ndef test_punctuation():\n    assert slugify("a, b!") == "a-b"\n\n\ndef test_digits():\n    assert slugify("v2 release") == "v2-release"\n',
    },
    fix: {
      'slugify/slug.py':
        'import re\n\n\ndef slugify(title):\n    words = re.findall(r"[A-Za-z0-9]+", title)\n    return "-".join(word.lower() for word in words)\n',
    },
    tests: {
      'tests/test_issue.py':
        'from slugify.slug import slugify\n\n\ndef test_lower_case():\n    assert slugify("Hello World") == "hello-world"\n',
    },
    failToPass: ['tests/test_issue.py::test_lower_case'],
    passToPass: ['tests/test_basic.py::test_punctuation', 'tests/test_basic.py::test_digits'],
  },
  {
    id: 'inventory-1',
    repo: 'gym-examples/inventory',
    problemStatement:
      'Inventory.remove() silently does nothing when asked to remove more items than are in stock, leaving a negative count. It should raise ValueError and leave the stock unchanged.',
    files: {
      ...pkg('inventory'),
      'inventory/store.py':
        'class Inventory:\n    def __init__(self):\n        self.counts = {}\n\n    def add(self, item, quantity=1):\n        self.counts[item] = self.counts.get(item, 0) + quantity\n\n    def remove(self, item, quantity=1):\n        self.counts[item] = self.counts.get(item, 0) - quantity\n\n    def count(self, item):\n        return self.counts.get(item, 0)\n',
      'tests/test_basic.py':
        'from inventory.store import Inventory\n\n\ndef test_add_and_remove():\n    stock = Inventory()\n    stock.add("apple", 3)\n    stock.remove("apple", 2)\n    assert stock.count("apple") == 1\n\n\ndef test_unknown_item():\n    assert Inventory().count("pear") == 0\n',
    },
    fix: {
      'inventory/store.py':
        'class Inventory:\n    def __init__(self):\n        self.counts = {}\n\n    def add(self, item, quantity=1):\n        self.counts[item] = self.counts.get(item, 0) + quantity\n\n    def remove(self, item, quantity=1):\n        available = self.counts.get(item, 0)\n        if quantity > available:\n            raise ValueError(f"only {available} {item} in stock")\n        self.counts[item] = available - quantity\n\n    def count(self, item):\n        return self.counts.get(item, 0)\n',
    },
    tests: {
      'tests/test_issue.py':
        'import pytest\n\nfrom inventory.store import Inventory\n\n\ndef test_remove_too_many():\n    stock = Inventory()\n    stock.add("apple", 1)\n    with pytest.raises(ValueError):\n        stock.remove("apple", 2)\n    assert stock.count("apple") == 1\n',
    },
    failToPass: ['tests/test_issue.py::test_remove_too_many'],
    passToPass: ['tests/test_basic.py::test_add_and_remove', 'tests/test_basic.py::test_unknown_item'],
  },
  {
    id: 'calendar-1',
    repo: 'gym-examples/calendar',
    problemStatement:
      'is_leap_year(1900) returns True. Century years are leap years only when divisible by 400 (2000 is, 1900 is not).',
    files: {
      ...pkg('calendarlib'),
      'calendarlib/years.py':
        'def is_leap_year(year):\n    return year % 4 == 0\n\n\ndef days_in_year(year):\n    return 366 if is_leap_year(year) else 365\n',
      'tests/test_basic.py':
        'from calendarlib.years import days_in_year, is_leap_year\n\n\ndef test_plain_leap():\n    assert is_leap_year(2024)\n\n\ndef test_plain_common():\n    assert days_in_year(2023) == 365\n',
    },
    fix: {
      'calendarlib/years.py':
        'def is_leap_year(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n\n\ndef days_in_year(year):\n    return 366 if is_leap_year(year) else 365\n',
    },
    tests: {
      'tests/test_issue.py':
        'from calendarlib.years import is_leap_year\n\n\ndef test_century():\n    assert not is_leap_year(1900)\n\n\ndef test_four_hundred():\n    assert is_leap_year(2000)\n',
    },
    failToPass: ['tests/test_issue.py::test_century'],
    passToPass: [
      'tests/test_basic.py::test_plain_leap',
      'tests/test_basic.py::test_plain_common',
      'tests/test_issue.py::test_four_hundred',
    ],
  },
  {
    id: 'csvlite-1',
    repo: 'gym-examples/csvlite',
    problemStatement:
      'parse_line("a, b ,c") returns ["a", " b ", "c"]: whitespace around fields is kept. Fields should be stripped.',
    files: {
      ...pkg('csvlite'),
      'csvlite/parse.py':
        'def parse_line(line, sep=","):\n    if line == "":\n        return []\n    return line.split(sep)\n',
      'tests/test_basic.py':
        'from csvlite.parse import parse_line\n\n\ndef test_plain():\n    assert parse_line("a,b") == ["a", "b"]\n\n\ndef test_empty():\n    assert parse_line("") == []\n',
    },
    fix: {
      'csvlite/parse.py':
        'def parse_line(line, sep=","):\n    if line == "":\n        return []\n    return [field.strip() for field in line.split(sep)]\n',
    },
    tests: {
      'tests/test_issue.py':
        'from csvlite.parse import parse_line\n\n\ndef test_strips_fields():\n    assert parse_line("a, b ,c") == ["a", "b", "c"]\n',
    },
    failToPass: ['tests/test_issue.py::test_strips_fields'],
    passToPass: ['tests/test_basic.py::test_plain', 'tests/test_basic.py::test_empty'],
  },
  {
    id: 'stack-1',
    repo: 'gym-examples/stack',
    problemStatement:
      'Stack.peek() on an empty stack returns None, which hides bugs in callers. It should raise IndexError like pop() does.',
    files: {
      ...pkg('stacklib'),
      'stacklib/stack.py':
        'class Stack:\n    def __init__(self):\n        self._items = []\n\n    def push(self, item):\n        self._items.append(item)\n\n    def pop(self):\n        return self._items.pop()\n\n    def peek(self):\n        if not self._items:\n            return None\n        return self._items[-1]\n',
      'tests/test_basic.py':
        'import pytest\n\nfrom stacklib.stack import Stack\n\n\ndef test_push_peek():\n    stack = Stack()\n    stack.push(1)\n    assert stack.peek() == 1\n\n\ndef test_pop_empty():\n    with pytest.raises(IndexError):\n        Stack().pop()\n',
    },
    fix: {
      'stacklib/stack.py':
        'class Stack:\n    def __init__(self):\n        self._items = []\n\n    def push(self, item):\n        self._items.append(item)\n\n    def pop(self):\n        return self._items.pop()\n\n    def peek(self):\n        if not self._items:\n            raise IndexError("peek from empty stack")\n        return self._items[-1]\n',
    },
    tests: {
      'tests/test_issue.py':
        'import pytest\n\nfrom stacklib.stack import Stack\n\n\ndef test_peek_empty():\n    with pytest.raises(IndexError):\n        Stack().peek()\n',
    },
    failToPass: ['tests/test_issue.py::test_peek_empty'],
    passToPass: ['tests/test_basic.py::test_push_peek', 'tests/test_basic.py::test_pop_empty'],
  },
  {
    id: 'temperature-1',
    repo: 'gym-examples/temperature',
    problemStatement:
      'celsius_to_fahrenheit(100) returns 148.0; water boils at 212 F. The conversion subtracts 32 instead of adding it.',
    files: {
      ...pkg('temperature'),
      'temperature/convert.py':
        'def celsius_to_fahrenheit(celsius):\n    return celsius * 9 / 5 - 32\n\n\ndef fahrenheit_to_celsius(fahrenheit):\n    return (fahrenheit - 32) * 5 / 9\n',
      'tests/test_basic.py':
        'from temperature.convert import fahrenheit_to_celsius\n\n\ndef test_freezing():\n    assert fahrenheit_to_celsius(32) == 0\n\n\ndef test_boiling():\n    assert fahrenheit_to_celsius(212) == 100\n',
    },
    fix: {
      'temperature/convert.py':
        'def celsius_to_fahrenheit(celsius):\n    return celsius * 9 / 5 + 32\n\n\ndef fahrenheit_to_celsius(fahrenheit):\n    return (fahrenheit - 32) * 5 / 9\n',
    },
    tests: {
      'tests/test_issue.py':
        'from temperature.convert import celsius_to_fahrenheit\n\n\ndef test_to_fahrenheit():\n    assert celsius_to_fahrenheit(100) == 212\n    assert celsius_to_fahrenheit(0) == 32\n',
    },
    failToPass: ['tests/test_issue.py::test_to_fahrenheit'],
    passToPass: ['tests/test_basic.py::test_freezing', 'tests/test_basic.py::test_boiling'],
  },
  {
    id: 'roman-1',
    repo: 'gym-examples/roman',
    problemStatement:
      'to_roman(4) returns "IIII" and to_roman(9) returns "VIIII". Subtractive forms are expected: "IV", "IX", "XL", "XC", "CD", "CM".',
    files: {
      ...pkg('roman'),
      'roman/numerals.py':
        'NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]\n\n\ndef to_roman(number):\n    result = ""\n    for value, symbol in NUMERALS:\n        while number >= value:\n            result += symbol\n            number -= value\n    return result\n',
      'tests/test_basic.py':
        'from roman.numerals import to_roman\n\n\ndef test_simple():\n    assert to_roman(3) == "III"\n\n\ndef test_large():\n    assert to_roman(2023) == "MMXXIII"\n',
    },
    fix: {
      'roman/numerals.py':
        'NUMERALS = [\n    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),\n    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),\n]\n\n\ndef to_roman(number):\n    result = ""\n    for value, symbol in NUMERALS:\n        while number >= value:\n            result += symbol\n            number -= value\n    return result\n',
    },
    tests: {
      'tests/test_issue.py':
        'from roman.numerals import to_roman\n\n\ndef test_subtractive():\n    assert to_roman(4) == "IV"\n    assert to_roman(9) == "IX"\n    assert to_roman(1994) == "MCMXCIV"\n',
    },
    failToPass: ['tests/test_issue.py::test_subtractive'],
    passToPass: ['tests/test_basic.py::test_simple', 'tests/test_basic.py::test_large'],
  },
  {
    id: 'pagination-1',
    repo: 'gym-examples/pagination',
    problemStatement:
      'page_count(total=11, per_page=5) returns 2, so the last item is never shown. A partial last page must count: expected 3.',
    files: {
      ...pkg('pagination'),
      'pagination/pages.py':
        'def page_count(total, per_page):\n    if per_page <= 0:\n        raise ValueError("per_page must be positive")\n    return total // per_page\n',
      'tests/test_basic.py':
        'import pytest\n\nfrom pagination.pages import page_count\n\n\ndef test_exact():\n    assert page_count(10, 5) == 2\n\n\ndef test_bad_size():\n    with pytest.raises(ValueError):\n        page_count(10, 0)\n',
    },
    fix: {
      'pagination/pages.py':
        'def page_count(total, per_page):\n    if per_page <= 0:\n        raise ValueError("per_page must be positive")\n    return -(-total // per_page)\n',
    },
    tests: {
      'tests/test_issue.py':
        'from pagination.pages import page_count\n\n\ndef test_partial_page():\n    assert page_count(11, 5) == 3\n\n\ndef test_empty():\n    assert page_count(0, 5) == 0\n',
    },
    failToPass: ['tests/test_issue.py::test_partial_page'],
    passToPass: [
      'tests/test_basic.py::test_exact',
      'tests/test_basic.py::test_bad_size',
      'tests/test_issue.py::test_empty',
    ],
  },
  {
    id: 'versions-1',
    repo: 'gym-examples/versions',
    problemStatement:
      'is_newer("1.10", "1.9") returns False because versions are compared as strings. Compare them component by component as numbers.',
    files: {
      ...pkg('versions'),
      'versions/compare.py': 'def is_newer(candidate, current):\n    return candidate > current\n',
      'tests/test_basic.py':
        'from versions.compare import is_newer\n\n\ndef test_simple():\n    assert is_newer("1.2", "1.1")\n\n\ndef test_equal():\n    assert not is_newer("2.0", "2.0")\n',
    },
    fix: {
      'versions/compare.py':
        'def _parts(version):\n    return [int(part) for part in version.split(".")]\n\n\ndef is_newer(candidate, current):\n    return _parts(candidate) > _parts(current)\n',
    },
    tests: {
      'tests/test_issue.py':
        'from versions.compare import is_newer\n\n\ndef test_numeric_components():\n    assert is_newer("1.10", "1.9")\n    assert not is_newer("1.9", "1.10")\n',
    },
    failToPass: ['tests/test_issue.py::test_numeric_components'],
    passToPass: ['tests/test_basic.py::test_simple', 'tests/test_basic.py::test_equal'],
  },
  {
    id: 'money-1',
    repo: 'gym-examples/money',
    problemStatement:
      'format_cents(5) returns "$0.5" and format_cents(1205) returns "$12.5". Amounts need two decimal places: "$0.05" and "$12.05".',
    files: {
      ...pkg('money'),
      'money/fmt.py':
        'def format_cents(cents):\n    dollars, rest = divmod(cents, 100)\n    return f"${dollars}.{rest}"\n',
      'tests/test_basic.py':
        'from money.fmt import format_cents\n\n\ndef test_whole():\n    assert format_cents(1234) == "$12.34"\n\n\ndef test_ten_cents():\n    assert format_cents(10) == "$0.10"\n',
    },
    fix: {
      'money/fmt.py':
        'def format_cents(cents):\n    dollars, rest = divmod(cents, 100)\n    return f"${dollars}.{rest:02d}"\n',
    },
    tests: {
      'tests/test_issue.py':
        'from money.fmt import format_cents\n\n\ndef test_padding():\n    assert format_cents(5) == "$0.05"\n    assert format_cents(1205) == "$12.05"\n',
    },
    failToPass: ['tests/test_issue.py::test_padding'],
    passToPass: ['tests/test_basic.py::test_whole', 'tests/test_basic.py::test_ten_cents'],
  },
];
