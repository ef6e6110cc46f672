from specconform.cli import main

main()
