"""Example user jobs written against esp's public operator API, as a user of esp would write them."""
