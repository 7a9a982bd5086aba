from simpletvm.cli import main

main()
