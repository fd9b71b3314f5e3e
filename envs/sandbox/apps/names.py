"""Name pools the seeders draw from (fixed, so a seed always gives the same world)."""

FIRST_NAMES = (
    "Alice", "Bruno", "Chen", "Dana", "Elif", "Farid", "Grace", "Hiro", "Ines", "Jonas",
    "Kemi", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara",
    "Umar", "Vera", "Wei", "Ximena", "Yusuf", "Zoe",
)  # fmt: skip
LAST_NAMES = (
    "Adams", "Berg", "Costa", "Diaz", "Evans", "Fischer", "Garcia", "Hansen", "Ito", "Jensen",
    "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Silva", "Tanaka",
    "Weber",
)  # fmt: skip
RELATIONS = ("sister", "brother", "mother", "father", "manager", "colleague", "friend",
             "partner", "dentist", "landlord")  # fmt: skip
CITIES = ("Lisbon", "Berlin", "Madrid", "Paris", "Rome", "Vienna", "Prague", "Oslo",
          "Dublin", "Amsterdam")  # fmt: skip
